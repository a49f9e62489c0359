"""Version consistency under load while both step models of an ensemble roll forward through the repository API.

The key guarantee: every request runs on ONE version set (step_a and step_b of the same version, never
mixed), the set agrees with the `ensemble_versions` response parameter, every request started after
`load_model` returned sees the new set, no request fails, and old versions go away once drained.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.integration.ensembles import repo
from tests.integration.ensembles.support import ensemble_versions, fp32_input, index, x_rows
from tests.support.load import ThreadedLoad
from tests.support.runtime_process import RuntimeProcess

ENSEMBLE = repo.ROLLOVER_ENSEMBLE
STEPS = repo.ROLLOVER_STEPS
THREADS = 6
REQUEST_LIMIT = 6000  # across all threads: the load stops here even if a test forgets to stop it
LOAD_DEADLINE_S = 25.0
WAIT_S = 15.0


@dataclass(frozen=True, slots=True)
class Outcome:
    thread: int
    started: float  # time.monotonic() just before the call
    finished: float = 0.0  # and just after it
    step_a: int = 0
    step_b: int = 0
    y_offset: float = 0.0  # y - x; the chain adds a's version, then b's
    versions: str = ""
    error: str = ""


class LoadGenerator(ThreadedLoad[Outcome]):
    """THREADS client threads calling the ensemble in a loop, until stopped, REQUEST_LIMIT or the deadline."""

    def __init__(self, url: str) -> None:
        super().__init__(THREADS, LOAD_DEADLINE_S)
        self._url = url

    def _work(self, thread: int) -> None:
        with grpcclient.InferenceServerClient(self._url) as client:
            for i in range(REQUEST_LIMIT):
                if not self._running():
                    return
                with self._changed:
                    if len(self._outcomes) >= REQUEST_LIMIT:
                        return
                x = x_rows(float(thread * 10_000 + i))
                started = time.monotonic()
                try:
                    result = client.infer(ENSEMBLE, [fp32_input("X", x)], request_id=f"{thread}-{i}")
                    offsets = result.as_numpy("y") - x
                    outcome = Outcome(
                        thread=thread,
                        started=started,
                        step_a=int(result.as_numpy("step_a_version")[0, 0]),
                        step_b=int(result.as_numpy("step_b_version")[0, 0]),
                        y_offset=float(offsets.mean()) if np.allclose(offsets, offsets.flat[0]) else float("nan"),
                        versions=ensemble_versions(result),
                        finished=time.monotonic(),
                    )
                except InferenceServerException as exc:
                    outcome = Outcome(thread, started, time.monotonic(), error=f"{exc.status()}: {exc.message()}")
                self._record(outcome)

    def wait_started_after(self, moment: float, per_thread: int = 20) -> None:
        """Block until every thread has finished `per_thread` requests it started after `moment`."""

        def enough() -> bool:
            counts = [0] * THREADS
            for outcome in self._outcomes:
                if outcome.started > moment:
                    counts[outcome.thread] += 1
            return min(counts) >= per_thread

        with self._changed:
            done = self._changed.wait_for(enough, WAIT_S)
            assert done, f"the load made no progress after t={moment:.3f} ({len(self._outcomes)} requests so far)"


def write_step_version(root: Path, step: str, version: int, content: bytes | None = None) -> None:
    model = repo.versioned_model(version) if content is None else content
    repo.write_version(root / step, version, {"model.onnx": model})


def ready_versions(client: grpcclient.InferenceServerClient, model: str) -> set[str]:
    return {e["version"] for e in index(client) if e["name"] == model and e.get("state") == "READY"}


def wait_ready_versions(client: grpcclient.InferenceServerClient, model: str, expected: set[str]) -> None:
    """Poll the repository index (with a deadline) until exactly `expected` versions of `model` are READY."""
    deadline = time.monotonic() + 20.0
    while (ready := ready_versions(client, model)) != expected:
        assert time.monotonic() < deadline, f"{model}: READY versions {ready}, expected {expected}"
        time.sleep(0.05)


def check_consistent(outcomes: Sequence[Outcome]) -> None:
    errors = [o.error for o in outcomes if o.error]
    assert not errors, f"{len(errors)} of {len(outcomes)} requests failed, e.g. {errors[:3]}"
    for o in outcomes:
        assert o.step_a == o.step_b, f"mixed version set: {o}"
        assert o.versions == f"step_a:{o.step_a},step_b:{o.step_b}", o
        assert o.y_offset == o.step_a + o.step_b, o


@pytest.fixture
def rollover_server(tmp_path: Path) -> Iterator[tuple[Path, RuntimeProcess]]:
    root = repo.build_rollover(tmp_path / "repo")
    with RuntimeProcess([root], ["--model-control-mode=explicit", f"--load-model={ENSEMBLE}"]) as proc:
        proc.wait_model_ready(ENSEMBLE)
        yield root, proc


def test_rollover_under_load_never_mixes_versions(rollover_server: tuple[Path, RuntimeProcess]) -> None:
    root, proc = rollover_server
    marks: list[tuple[float, int]] = []  # (when load_model returned, version every later request must see)
    issued: list[tuple[float, int]] = []  # (when load_model of a new version was called, that version)
    with proc.grpc_client() as client:
        with LoadGenerator(proc.grpc_url) as load:
            load.wait_started_after(0.0)
            for new in (2, 3):
                for step in STEPS:
                    write_step_version(root, step, new)
                issued.append((time.monotonic(), new))
                client.load_model(ENSEMBLE)
                marks.append((time.monotonic(), new))
                load.wait_started_after(marks[-1][0])
                for step in STEPS:  # the old version is drained and unloaded, not READY any more
                    wait_ready_versions(client, step, {str(new)})
                    repo.remove_version(root / step, new - 1)
                client.load_model(ENSEMBLE)  # re-sync with the old directory gone: nothing changes
                marks.append((time.monotonic(), new))
                load.wait_started_after(marks[-1][0])
            outcomes = load.stop()
        assert ready_versions(client, ENSEMBLE) == {"1"}
        assert {e["version"] for e in index(client) if e["name"] in STEPS} == {"3"}

    check_consistent(outcomes)
    for o in outcomes:
        due = max((v for t, v in marks if t < o.started), default=1)
        assert o.step_a >= due, f"request started after the load of version {due} returned ran on {o}"
        possible = max((v for t, v in issued if t < o.finished), default=1)
        assert o.step_a <= possible, f"request finished before version {o.step_a} was loaded: {o}"
    seen = {o.step_a for o in outcomes}
    assert seen == {1, 2, 3}, seen


def broken_rollout(root: Path, proc: RuntimeProcess) -> tuple[list[Outcome], str, list[dict[str, str]]]:
    """Under load, add version 2 of both steps with step_b's corrupt, and load: what requests and index show."""
    with proc.grpc_client() as client, LoadGenerator(proc.grpc_url) as load:
        load.wait_started_after(0.0)
        write_step_version(root, "step_a", 2)
        write_step_version(root, "step_b", 2, b"\x08\x07corrupt, not an onnx model")
        with pytest.raises(InferenceServerException) as failed:
            client.load_model(ENSEMBLE)
        load.wait_started_after(time.monotonic(), per_thread=10)
        outcomes = load.stop()
        assert client.is_model_ready(ENSEMBLE)
        return outcomes, failed.value.message(), index(client)


def test_broken_new_version_is_reported_and_never_served(rollover_server: tuple[Path, RuntimeProcess]) -> None:
    outcomes, message, entries = broken_rollout(*rollover_server)
    assert "step_b" in message and "version 2" in message, message
    assert not [o.error for o in outcomes if o.error], outcomes
    assert all(o.step_b == 1 for o in outcomes), {o.step_b for o in outcomes}
    for o in outcomes:
        assert o.versions == f"step_a:{o.step_a},step_b:{o.step_b}", o
        assert o.y_offset == o.step_a + o.step_b, o
    broken = [e for e in entries if e["name"] == "step_b" and e.get("version") == "2"]
    assert broken and broken[0]["state"] == "UNAVAILABLE" and broken[0]["reason"], broken


def test_broken_new_version_keeps_the_old_consistent_set(rollover_server: tuple[Path, RuntimeProcess]) -> None:
    outcomes, _, _ = broken_rollout(*rollover_server)
    check_consistent(outcomes)
    assert {(o.step_a, o.step_b) for o in outcomes} == {(1, 1)}
