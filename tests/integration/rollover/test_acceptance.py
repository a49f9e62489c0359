"""Acceptance: live, zero-failure version rollover of an ensemble served from S3 (MinIO) in poll mode.

The `pipe` ensemble runs `step_a` and `step_b` (each the `versioned` ONNX model: Y = X + v, `version` = v)
side by side and returns both `version` tensors. Eight client streams run throughout while the test

1. uploads version 2 of both steps WITH `.complete` markers: {a:2, b:2} serves within a poll plus load time;
2. uploads version 3 WITHOUT markers (complete by the two-poll rule), step_b's model.onnx being random bytes:
   step_b 3 shows UNAVAILABLE with a reason, the corrupt version never serves, and step_a's good version 3
   does not switch alone (all or nothing per ensemble): the set stays {2, 2} across retries;
3. deletes version 1 from S3 while serving continues (two polls later it is in neither the index nor the cache);
4. uploads a corrected step_b version 3 (no marker): {3, 3} serves, without a restart.

Throughout: zero failed requests, zero mixed-version responses (a_version == b_version, the `ensemble_versions`
parameter agrees, Y == X + version for both steps). Uploads are lined up right after a poll (see
`scenario.py` for why related uploads must not straddle one).

Three runs of the scenario:
- `test_rollover_from_s3_under_load`: exactly the above (it caught a poll that switched step_a alone when
  step_b's new version failed, and a load-time re-sync that counted as the second listing of a version).
- `test_corrected_step_and_its_sibling_switch_together`: corrupt step_b 3 uploaded alone, then step_a 3 and
  the corrected step_b 3 uploaded together (no markers): they switch in the same poll.
- `test_rollover_with_failed_version_removed_first`: corrupt step_b 3 uploaded alone, deleted again, then
  both steps' version 3 uploaded together (no markers).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.rollover.scenario import Scenario
from tests.integration.rollover.support import (
    Load,
    assert_consistent,
    index_entries,
    repository_uri,
    serving,
    upload_pipeline,
)
from tests.integration.s3.helpers import S3Helper

pytestmark = [pytest.mark.s3, pytest.mark.timeout(120)]

NEW_VERSION_BOUND_S = 30.0  # generous: poll interval (1 s) + download + load + warm-up, on a busy machine


def run(s3: S3Helper, tmp_path: Path, variant: str) -> None:
    cache = tmp_path / "cache"
    upload_pipeline(s3, [1])
    with serving(repository_uri(s3.endpoint_url), str(cache)) as proc, Load(proc.grpc_url, deadline_s=100) as load:
        load.wait_for("{a:1, b:1}", lambda o: o.versions == (1, 1), after=0.0)
        scenario = Scenario(s3, proc, load, cache)

        v2 = scenario.roll_v2_with_markers()
        corrupt = scenario.upload_corrupt_v3(with_step_a=variant == "brief")
        held = [o.versions for o in load.outcomes() if o.started > corrupt.uploaded and not o.error]
        assert set(held) == {(2, 2)}, f"version sets served after the corrupt upload: {sorted(set(held))}"
        scenario.remove_v1()
        if variant == "clean":
            scenario.delete_corrupt_v3()
        v3 = scenario.fix_v3(with_step_a=variant != "brief")
        assert index_entries(proc, "step_b")["3"]["state"] == "READY"
        outcomes = load.stop()
        assert proc.proc is not None and proc.proc.poll() is None, "the runtime exited"

    print(
        f"\nrollover from S3 ({variant}): {len(outcomes)} requests; upload -> first response from the new set: "
        f"v2 (markers) {v2.seconds_to_serve:.2f}s, v3 (two-poll rule) {v3.seconds_to_serve:.2f}s"
    )
    assert_consistent(outcomes)
    served_corrupt = [o for o in outcomes if o.started < v3.uploaded and o.versions[1:] == (3,)]
    assert not served_corrupt, f"the corrupt step_b version 3 served: {served_corrupt[:3]}"
    after = {o.versions for o in outcomes if o.started > v3.settled}
    assert after == {(3, 3)}, after
    for event in (v2, v3):
        assert event.seconds_to_serve is not None and event.seconds_to_serve < NEW_VERSION_BOUND_S, event


def test_rollover_from_s3_under_load(s3: S3Helper, tmp_path: Path) -> None:
    run(s3, tmp_path, "brief")


def test_corrected_step_and_its_sibling_switch_together(s3: S3Helper, tmp_path: Path) -> None:
    run(s3, tmp_path, "sibling")


def test_rollover_with_failed_version_removed_first(s3: S3Helper, tmp_path: Path) -> None:
    run(s3, tmp_path, "clean")
