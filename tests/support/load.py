"""The thread plumbing every client load in the tests shares: worker threads that call until `stop()` or a
deadline and record each outcome under one condition, so that tests can wait for what they need to see.
Subclasses write `_work(worker)`: what one thread does, calling `_running()` and `_record()`."""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Generic, Self, TypeVar

Out = TypeVar("Out")


class ThreadedLoad(Generic[Out]):
    def __init__(self, workers: int, deadline_s: float) -> None:
        self.workers = workers
        self._changed = threading.Condition()
        self._outcomes: list[Out] = []
        self._stop = threading.Event()
        self._deadline = time.monotonic() + deadline_s
        self._threads = [threading.Thread(target=self._work, args=(w,), daemon=True) for w in range(workers)]

    def __enter__(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> list[Out]:
        """Stop the workers (each finishes the call it is in) and return every outcome."""
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        with self._changed:
            return list(self._outcomes)

    def _running(self) -> bool:
        return not self._stop.is_set() and time.monotonic() <= self._deadline

    def _record(self, outcome: Out) -> None:
        with self._changed:
            self._outcomes.append(outcome)
            self._changed.notify_all()

    def _work(self, worker: int) -> None:
        raise NotImplementedError
