"""The demo's progress printing: stage numbering and durations, the ticker's elapsed and remaining time."""

from __future__ import annotations

import io
import threading

from demo.progress import Progress, clock_text, remaining_text


class StepClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


def test_clock_text_rounds_to_whole_seconds() -> None:
    assert [clock_text(s) for s in (0, 59.4, 59.6, 75.2, 3600)] == ["0:00", "0:59", "1:00", "1:15", "60:00"]
    assert clock_text(-3) == "0:00"


def test_remaining_text_counts_down_then_admits_overrun() -> None:
    assert remaining_text(10, None) == ""
    assert remaining_text(10, 70) == ", about 1:00 left"
    assert remaining_text(80, 70) == ", taking longer than usual"


def test_stages_are_numbered_and_timed() -> None:
    out, clock = io.StringIO(), StepClock()
    progress = Progress(out, 2, interactive=False, clock=clock)
    with progress.stage("First"):
        progress.say("one\ntwo")
        clock.advance(2.5)
    with progress.stage("Second"):
        clock.advance(1.0)
    text = out.getvalue()
    assert "[1/2] First" in text and "[2/2] Second" in text
    assert "      one\n      two\n" in text
    assert "done in 2.5 s" in text and "done in 1.0 s" in text
    assert progress.durations == {"First": 2.5, "Second": 1.0}


def test_ticking_reports_usual_duration_and_completion() -> None:
    out, clock = io.StringIO(), StepClock()
    progress = Progress(out, 1, interactive=False, every_s=3600.0, clock=clock)
    with progress.ticking("building k8s", 1200):
        clock.advance(65)
    lines = out.getvalue().splitlines()
    assert lines[0].strip() == "building k8s (usually 20:00)"
    assert lines[-1].strip() == "building k8s: done in 1:05"


def test_a_stage_that_raises_is_not_reported_done() -> None:
    out = io.StringIO()
    progress = Progress(out, 1, interactive=False)
    try:
        with progress.stage("Broken"):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert "done in" not in out.getvalue() and progress.durations == {}
