"""Storage failures met while the runtime serves from S3 (MinIO) in poll mode, with clients running throughout.

Each test serves the `pipe` repository (see `support.upload_pipeline`) and keeps eight client streams on a
model (or the ensemble) while it breaks something; every request must succeed and answer with the right values.
Faults come from stopping MinIO for real, or from the fault-injecting proxy the runtime is pointed at.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.infra.minio import MinioServer
from tests.infra.tools import ToolLocator
from tests.integration.rollover.support import (
    ENSEMBLE,
    PREFIX,
    STEPS,
    Load,
    assert_consistent,
    index_entries,
    metric,
    repository_uri,
    served_versions,
    serving,
    step_config,
    storage_status,
    upload_pipeline,
    wait_syncs,
    wait_until,
)
from tests.integration.s3.helpers import S3Helper
from tests.support.fault_proxy import FaultProxy

pytestmark = [pytest.mark.s3, pytest.mark.timeout(120)]

OUTAGE_S = 45.0  # botocore's standard mode retries the listing 5 times with backoff before a sync gives up


def test_outage_keeps_serving_and_recovers(
    s3: S3Helper, minio_server: MinioServer, tool_locator: ToolLocator, tmp_path: Path
) -> None:
    """MinIO stopped: requests keep succeeding from the loaded versions, the status endpoint and metrics say
    the storage is unreachable (naming the endpoint). A version uploaded meanwhile (through a second MinIO on
    the same data, on another port, so the runtime's endpoint stays down) is picked up once MinIO is back."""
    upload_pipeline(s3, [1])
    with serving(repository_uri(s3.endpoint_url), str(tmp_path / "cache")) as proc, Load(proc.grpc_url) as load:
        load.wait_for("{1, 1}", lambda o: o.versions == (1, 1), after=0.0)
        minio_server.stop()
        down = wait_until(
            lambda: st if not (st := storage_status(proc))["reachable"] else None,
            "the status endpoint to report the outage",
            proc,
            timeout=OUTAGE_S,
        )
        error = down["sources"][0]["error"]
        assert "unreachable" in error and f"127.0.0.1:{minio_server.port}" in error, error
        assert metric(proc, "ensemble_repository_reachable") == 0.0
        assert metric(proc, "ensemble_repository_sync_failures_total") >= 1
        load.wait_progress(time.monotonic(), per_worker=20)

        with MinioServer(
            data_dir=minio_server.data_dir,
            access_key=minio_server.access_key,
            secret_key=minio_server.secret_key,
            locator=tool_locator,
        ) as elsewhere:
            side = S3Helper(elsewhere, elsewhere.boto3_client())
            for step in STEPS:
                side.put_version(f"{PREFIX}/{step}", 2, marker=True)
        load.wait_progress(time.monotonic(), per_worker=5)
        assert {o.versions for o in load.outcomes()} == {(1, 1)}

        minio_server.start()
        back = time.monotonic()
        wait_until(
            lambda: storage_status(proc)["reachable"], "the status endpoint to report recovery", proc, timeout=OUTAGE_S
        )
        assert metric(proc, "ensemble_repository_reachable") == 1.0
        first = load.wait_for("{2, 2}", lambda o: o.versions == (2, 2), after=back, timeout=OUTAGE_S)
        print(f"\noutage: version uploaded while down served {first.finished - back:.2f}s after MinIO came back")
        outcomes = load.stop()
    assert_consistent(outcomes)


def test_throttled_poll_still_delivers_the_new_version(s3: S3Helper, proxy: FaultProxy, tmp_path: Path) -> None:
    """503 SlowDown for the next 4 requests of the poll that finds a new version (fewer than botocore's 5
    attempts): the requests are retried with backoff, the new version arrives, no inference fails."""
    upload_pipeline(s3, [1])
    with (
        serving(repository_uri(proxy.endpoint_url), str(tmp_path / "cache")) as proc,
        Load(proc.grpc_url, "step_a") as load,
    ):
        load.wait_for("version 1", lambda o: o.versions == (1,), after=0.0)
        wait_syncs(proc)
        s3.put_version(f"{PREFIX}/step_a", 2, marker=True)
        proxy.inject("slowdown", count=4, method=None)
        uploaded = time.monotonic()
        load.wait_for("version 2", lambda o: o.versions == (2,), after=uploaded)
        assert proxy.delivered("slowdown") == 4
        assert sum(status == 503 for _, _, status in proxy.requests()) == 4
        status = storage_status(proc)
        assert status["reachable"] and status["sources"][0]["errors"] == {}, status
        assert status["models"] == {ENSEMBLE: [], "step_a": [1, 2], "step_b": [1]}, status
        outcomes = load.stop()
    assert_consistent(outcomes)


def test_truncated_version_is_not_loaded_until_a_poll_succeeds(s3: S3Helper, proxy: FaultProxy, tmp_path: Path) -> None:
    """Every download of the new version's model.onnx truncated (a short body with a consistent
    Content-Length): the version is not loaded, the status and the index report it, version 1 keeps serving.
    Once the proxy stops truncating, the next poll fetches it whole and it serves."""
    upload_pipeline(s3, [1])
    with (
        serving(repository_uri(proxy.endpoint_url), str(tmp_path / "cache")) as proc,
        Load(proc.grpc_url, "step_a") as load,
    ):
        load.wait_for("version 1", lambda o: o.versions == (1,), after=0.0)
        proxy.inject("truncate", count=10_000, path_contains="/step_a/2/model.onnx")
        s3.put_version(f"{PREFIX}/step_a", 2, marker=True)
        uploaded = time.monotonic()
        status = wait_until(
            lambda: st if "step_a/2" in (st := storage_status(proc))["sources"][0]["errors"] else None,
            "the truncated version in the status errors",
            proc,
        )
        assert "bytes, the listing says" in status["sources"][0]["errors"]["step_a/2"], status
        assert status["models"]["step_a"] == [1, 2], status  # found in storage, though it cannot be loaded
        entry = index_entries(proc, "step_a")["2"]
        assert entry["state"] == "UNAVAILABLE" and entry["reason"].startswith("storage:"), entry
        assert metric(proc, "ensemble_repository_fetch_errors") == 1.0
        wait_syncs(proc)  # another poll, truncated again: still version 1
        load.wait_progress(time.monotonic())
        assert {o.versions for o in load.outcomes() if o.started > uploaded and not o.error} == {(1,)}

        proxy.clear()
        healed = time.monotonic()
        load.wait_for("version 2", lambda o: o.versions == (2,), after=healed)
        wait_until(lambda: storage_status(proc)["sources"][0]["errors"] == {}, "the status errors to clear", proc)
        assert proxy.delivered("truncate") >= 4  # every attempt of at least one poll
        outcomes = load.stop()
    assert_consistent(outcomes)


def test_deleted_version_in_use_keeps_serving(s3: S3Helper, tmp_path: Path) -> None:
    """Under `latest {num_versions: 1}`, the served version 1 of step_a is deleted from S3, no newer one there.

    Decided behaviour: the runtime keeps serving the loaded version rather than leave the model with
    nothing: its cached copy stays (the sync never removes versions in use), it stays READY and is the only
    version in the metadata, across polls. When a new version is uploaded, that one loads and serves and
    the deleted one drains, unloads and leaves the cache."""
    cache = tmp_path / "cache"
    upload_pipeline(s3, [1])
    with serving(repository_uri(s3.endpoint_url), str(cache)) as proc, Load(proc.grpc_url, "step_a") as load:
        load.wait_for("version 1", lambda o: o.versions == (1,), after=0.0)
        s3.delete_prefix(f"{PREFIX}/step_a/1/")
        wait_syncs(proc, 3)
        load.wait_progress(time.monotonic())
        assert index_entries(proc, "step_a")["1"]["state"] == "READY"
        assert served_versions(proc, "step_a") == ["1"]
        assert (cache / "s3-0" / "step_a" / "1" / "model.onnx").is_file()
        assert {o.versions for o in load.outcomes()} == {(1,)}

        s3.put_version(f"{PREFIX}/step_a", 2, marker=True)
        load.wait_for("version 2", lambda o: o.versions == (2,), after=time.monotonic())
        wait_until(lambda: not (cache / "s3-0" / "step_a" / "1").exists(), "version 1 to leave the cache", proc)
        assert served_versions(proc, "step_a") == ["2"]
        outcomes = load.stop()
    assert_consistent(outcomes)


def test_policy_change_by_uploading_a_new_config(s3: S3Helper, tmp_path: Path) -> None:
    """step_a's config changes from `latest {num_versions: 2}` to `specific {versions: [1]}` on S3: the
    metadata's versions become [1] and requests naming no version go to 1, with no failures meanwhile."""
    upload_pipeline(s3, [1, 2], policy="latest { num_versions: 2 }")
    with (
        serving(repository_uri(s3.endpoint_url), str(tmp_path / "cache")) as proc,
        Load(proc.grpc_url, "step_a") as load,
    ):
        assert served_versions(proc, "step_a") == ["1", "2"]
        load.wait_for("version 2", lambda o: o.versions == (2,), after=0.0)
        wait_syncs(proc)
        s3.put(f"{PREFIX}/step_a/config.pbtxt", step_config("step_a", "specific { versions: [1] }"))
        changed = time.monotonic()
        first = load.wait_for("version 1", lambda o: o.versions == (1,), after=changed)
        wait_until(lambda: served_versions(proc, "step_a") == ["1"], "metadata versions [1]", proc)
        load.wait_progress(time.monotonic())
        assert {o.versions for o in load.outcomes() if o.started > first.finished} == {(1,)}
        assert index_entries(proc, ENSEMBLE)  # the ensemble is still indexed
        outcomes = load.stop()
    assert_consistent(outcomes)
