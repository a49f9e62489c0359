"""What the demo prints while it works: numbered stages, indented detail, and for long steps a ticker with the
elapsed time and, when the step's usual duration is known, about how long is left."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO


def clock_text(seconds: float) -> str:
    """`75.2` -> `1:15`."""
    whole = max(0, round(seconds))
    return f"{whole // 60}:{whole % 60:02d}"


def remaining_text(elapsed: float, expected: float | None) -> str:
    """What to say about the time left of a step usually taking `expected` seconds."""
    if expected is None:
        return ""
    left = expected - elapsed
    if left > 0:
        return f", about {clock_text(left)} left"
    return ", taking longer than usual"


class Progress:
    """Prints to `out`; `interactive` redraws one ticker line in place, otherwise a line every `every_s`."""

    def __init__(self, out: TextIO, stages: int, *, interactive: bool, every_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._out = out
        self._stages = stages
        self._interactive = interactive
        self._every_s = 1.0 if interactive else every_s
        self._clock = clock
        self._number = 0
        self.began = clock()
        self.durations: dict[str, float] = {}

    def say(self, text: str = "") -> None:
        for line in text.splitlines() or [""]:
            print(f"      {line}", file=self._out, flush=True)

    @contextmanager
    def stage(self, title: str) -> Iterator[None]:
        self._number += 1
        began = self._clock()
        print(f"\n[{self._number}/{self._stages}] {title}", file=self._out, flush=True)
        yield
        took = self._clock() - began
        self.durations[title] = took
        print(f"      done in {took:.1f} s", file=self._out, flush=True)

    @contextmanager
    def ticking(self, what: str, expected_s: float | None = None) -> Iterator[None]:
        """Show `what` with its elapsed time until the block ends."""
        began = self._clock()
        stop = threading.Event()

        def line() -> str:
            elapsed = self._clock() - began
            return f"      {what}: {clock_text(elapsed)} elapsed{remaining_text(elapsed, expected_s)}"

        def tick() -> None:
            while not stop.wait(self._every_s):
                if self._interactive:
                    print("\r" + line().ljust(100), end="", file=self._out, flush=True)
                else:
                    print(line(), file=self._out, flush=True)

        if not self._interactive or expected_s is not None:
            print(f"      {what}" + (f" (usually {clock_text(expected_s)})" if expected_s else ""),
                  file=self._out, flush=True)
        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()
            if self._interactive:
                print("\r" + " " * 100 + "\r", end="", file=self._out, flush=True)
            print(f"      {what}: done in {clock_text(self._clock() - began)}", file=self._out, flush=True)
