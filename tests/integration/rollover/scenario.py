"""The steps of the S3 rollover acceptance scenario, shared by `test_acceptance.py` and `bench/rollover.py`.

Each step uploads right after a poll's listing (`wait_syncs`): S3 has no multi-object transaction, so a
poll that listed step_a's new version complete but not yet step_b's would make the runtime serve the new
step_a with the old step_b (each step runs its latest version): no runtime can tell that apart from an
intended step_a-only release. The uploads here take milliseconds, well inside the 1 s poll interval.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.rollover.support import PREFIX, STEPS, Load, index_entries, wait_syncs, wait_until
from tests.integration.s3.helpers import S3Helper, onnx_bytes
from tests.support.runtime_process import RuntimeProcess


@dataclass(frozen=True, slots=True)
class Event:
    name: str
    uploaded: float  # time.monotonic() once the upload finished
    settled: float  # when the runtime had acted on it: first response from the new set, or the failure seen
    seconds_to_serve: float | None = None  # upload -> first response from the new version set


@dataclass
class Scenario:
    s3: S3Helper
    proc: RuntimeProcess
    load: Load
    cache: Path  # the runtime's --model-cache-dir
    serve_timeout: float = 45.0
    events: list[Event] = field(default_factory=list)

    def _serve(self, name: str, versions: tuple[int, int], uploaded: float) -> Event:
        first = self.load.wait_for(
            str(versions), lambda o: o.versions == versions, after=uploaded, timeout=self.serve_timeout
        )
        event = Event(name, uploaded, first.finished, first.finished - uploaded)
        self.events.append(event)
        return event

    def roll_v2_with_markers(self) -> Event:
        """Version 2 of both steps, each completed by a `.complete` marker (model files first, markers last)."""
        wait_syncs(self.proc)
        for step in STEPS:
            self.s3.put(f"{PREFIX}/{step}/2/model.onnx", onnx_bytes(2))
        for step in STEPS:
            self.s3.put(f"{PREFIX}/{step}/2/.complete", b"")
        return self._serve("v2 (.complete markers)", (2, 2), time.monotonic())

    def upload_corrupt_v3(self, *, with_step_a: bool) -> Event:
        """Version 3 without markers (the two-poll rule completes it), step_b's model.onnx random bytes;
        with `with_step_a`, step_a's good version 3 in the same poll. Returns once step_b 3 shows
        UNAVAILABLE (with a reason) and two more polls have retried it."""
        wait_syncs(self.proc)
        if with_step_a:
            self.s3.put(f"{PREFIX}/step_a/3/model.onnx", onnx_bytes(3))
        self.s3.put(f"{PREFIX}/step_b/3/model.onnx", os.urandom(4096))
        uploaded = time.monotonic()
        broken = wait_until(
            lambda: e if (e := index_entries(self.proc, "step_b").get("3", {})).get("state") == "UNAVAILABLE" else None,
            "step_b version 3 UNAVAILABLE in the index",
            self.proc,
            timeout=self.serve_timeout,
        )
        assert broken.get("reason"), f"no reason given: {broken}"
        event = Event("v3, step_b corrupt", uploaded, time.monotonic())
        wait_syncs(self.proc, 2)
        self.load.wait_progress(time.monotonic())
        self.events.append(event)
        return event

    def remove_v1(self) -> Event:
        """Version 1 of both steps deleted from S3 while serving continues (two polls see it gone; under
        `latest {num_versions: 1}` it left the cache when version 2 replaced it, so nothing is to unload)."""
        for step in STEPS:
            self.s3.delete_prefix(f"{PREFIX}/{step}/1/")
        uploaded = time.monotonic()
        wait_syncs(self.proc, 2)
        for step in STEPS:
            assert "1" not in index_entries(self.proc, step), f"{step} still indexes version 1"
            assert not (self.cache / "s3-0" / step / "1").exists(), f"{step} version 1 still cached"
        event = Event("v1 deleted", uploaded, time.monotonic())
        self.load.wait_progress(time.monotonic())
        self.events.append(event)
        return event

    def delete_corrupt_v3(self) -> Event:
        """step_b's corrupt version 3 deleted from S3: it leaves the cache and the runtime stops retrying it."""
        self.s3.delete_prefix(f"{PREFIX}/step_b/3/")
        uploaded = time.monotonic()
        wait_until(
            lambda: not (self.cache / "s3-0" / "step_b" / "3").exists(),
            "step_b 3 to leave the cache",
            self.proc,
            timeout=self.serve_timeout,
        )
        event = Event("corrupt v3 deleted", uploaded, time.monotonic())
        self.events.append(event)
        return event

    def fix_v3(self, *, with_step_a: bool) -> Event:
        """A corrected step_b version 3 replaces the corrupt object (no marker); with `with_step_a`, step_a's
        version 3 is uploaded in the same poll. Then {3, 3} serves, without a restart."""
        wait_syncs(self.proc)
        if with_step_a:
            self.s3.put(f"{PREFIX}/step_a/3/model.onnx", onnx_bytes(3))
        self.s3.put(f"{PREFIX}/step_b/3/model.onnx", onnx_bytes(3))
        event = self._serve("v3 corrected (no marker)", (3, 3), time.monotonic())
        self.load.wait_progress(event.settled)
        return event
