"""The invariant every example must hold: a clear refusal or a correct answer; no 5xx, hang or memory growth."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.property.plans import UNAVAILABLE_MODELS, Plan
from tests.property.wire import Answer

RSS_BOUND_BYTES = 200 * 2**20  # growth of the server's peak resident set (VmHWM) over a test's start
REFUSALS_GRPC = frozenset({"INVALID_ARGUMENT", "NOT_FOUND", "RESOURCE_EXHAUSTED"})
REFUSALS_HTTP = frozenset({"400", "404", "413", "429"})


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident set so far: catches an allocation freed again before we look."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for pid {pid}")


class MemoryWatch:
    """The server's peak RSS must stay within RSS_BOUND_BYTES of what it was when the watch started."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.baseline = peak_rss_bytes(pid)

    def check(self) -> None:
        grown = peak_rss_bytes(self.pid) - self.baseline
        assert grown < RSS_BOUND_BYTES, f"server peak RSS grew by {grown / 2**20:.0f} MiB (bound {RSS_BOUND_BYTES / 2**20:.0f})"


def is_refusal(answer: Answer, model: str = "") -> bool:
    """A clear refusal: a client-error code (UNAVAILABLE only for a model that failed to load), with a message."""
    unavailable = model in UNAVAILABLE_MODELS
    allowed = answer.code in REFUSALS_GRPC or answer.code in REFUSALS_HTTP
    allowed = allowed or (unavailable and answer.code in ("UNAVAILABLE", "503"))
    return allowed and bool(answer.message.strip())


def assert_refused(answer: Answer, model: str = "") -> None:
    assert is_refusal(answer, model), f"expected a clear client error, got {answer.code}: {answer.message[:500]!r}"


def assert_holds(plan: Plan, answer: Answer) -> None:
    """The oracle: a valid plan gets exactly its expected outputs; an invalid one a clear refusal."""
    if not plan.valid:
        assert answer.code != "OK", f"accepted a request with {plan.mutations}"
        assert_refused(answer, plan.model)
        return
    assert answer.code == "OK", f"refused a valid request: {answer.code}: {answer.message[:500]!r}"
    assert answer.outputs is not None
    assert set(answer.outputs) == plan.output_names(), (sorted(answer.outputs), sorted(plan.output_names()))
    for name, expected in plan.expected().items():
        got = answer.outputs[name]
        assert got.shape == expected.shape, (name, got.shape, expected.shape)
        if expected.dtype == np.object_:
            assert list(got.reshape(-1)) == list(expected.reshape(-1)), name
        else:
            np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=1e-6, err_msg=name)
