"""A step's new version arrives whole while its sibling's is still being uploaded (served from MinIO, poll mode).

Both steps of the `pipe` ensemble get version 2. step_a's lands complete (with its `.complete` marker) while
step_b's model.onnx is still being written: it changes between polls and has no marker. Until step_b's upload
is complete the ensemble must keep serving {1, 1}: switching step_a alone would serve {2, 1}, a set nobody
uploaded. Once step_b's upload completes, both switch in the same poll. The e2e rollover test met the short form
of this race (a poll between the two `.complete` markers of one upload); here it is held open for three polls.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.integration.rollover.support import (
    PREFIX,
    Load,
    assert_consistent,
    repository_uri,
    served_versions,
    serving,
    storage_status,
    upload_pipeline,
    wait_syncs,
)
from tests.integration.s3.helpers import S3Helper

pytestmark = [pytest.mark.s3, pytest.mark.timeout(120)]

POLLS_IN_FLIGHT = 3


def test_sibling_waits_while_a_step_is_still_uploading(s3: S3Helper, tmp_path: Path) -> None:
    upload_pipeline(s3, [1])
    with serving(repository_uri(s3.endpoint_url), str(tmp_path / "cache")) as proc, Load(proc.grpc_url) as load:
        load.wait_for("{1, 1}", lambda o: o.versions == (1, 1), after=0.0)
        wait_syncs(proc)
        s3.put_version(f"{PREFIX}/step_a", 2, marker=True)
        for part in range(POLLS_IN_FLIGHT):
            s3.put(f"{PREFIX}/step_b/2/model.onnx", os.urandom(4096 + part))  # still changing: not complete
            wait_syncs(proc)
            status = storage_status(proc)
            assert status["uploading"] == {"step_b": [2]}, status
            assert served_versions(proc, "step_a") == ["1"], "step_a switched while step_b was still uploading"
        load.wait_progress(time.monotonic())
        assert {o.versions for o in load.outcomes() if not o.error} == {(1, 1)}

        s3.put_version(f"{PREFIX}/step_b", 2, marker=True)
        completed = time.monotonic()
        load.wait_for("{2, 2}", lambda o: o.versions == (2, 2), after=completed)
        assert storage_status(proc)["uploading"] == {}
        outcomes = load.stop()
    assert {o.versions for o in outcomes if not o.error} == {(1, 1), (2, 2)}
    assert_consistent(outcomes)
