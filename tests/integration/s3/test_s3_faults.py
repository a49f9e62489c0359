"""Failures met for real: faults injected by a reverse proxy in front of MinIO, and MinIO stopped."""

from __future__ import annotations

from pathlib import Path

import pytest
from ensemble_runtime.repository.sources import S3Source

from tests.integration.s3.helpers import FAST, S3Helper, cached_versions, onnx_bytes
from tests.support.fault_proxy import Fault, FaultProxy

pytestmark = [pytest.mark.s3, pytest.mark.asyncio]


def through(proxy: FaultProxy, tmp_path: Path) -> S3Source:
    host_port = proxy.endpoint_url.removeprefix("http://")
    return S3Source(f"s3://{host_port}/models/repo", tmp_path / "cache", FAST, settle_secs=0.1)


def staging_is_empty(src: S3Source) -> bool:
    return list((src.root / ".tmp").iterdir()) == []


@pytest.mark.parametrize(
    ("fault", "detail"), [("truncate", "bytes, the listing says"), ("corrupt", "does not match ETag")]
)
async def test_bad_transfer_is_caught_and_retried(
    s3: S3Helper, proxy: FaultProxy, tmp_path: Path, fault: Fault, detail: str
) -> None:
    s3.put_versioned("repo/versioned", [1, 2])
    src = through(proxy, tmp_path)

    # Once: the per-object retry fetches it again and the sync succeeds.
    proxy.inject(fault, count=1, path_contains="/versioned/1/model.onnx")
    report = await src.sync()
    assert proxy.delivered(fault) == 1
    assert report.errors == {} and cached_versions(src.root) == {"versioned": [1, 2]}
    assert (src.root / "versioned" / "1" / "model.onnx").read_bytes() == onnx_bytes(1)

    # Every attempt: the version is reported, never half-materialised; other versions carry on.
    s3.put_version("repo/versioned", 3, marker=True)
    s3.put_version("repo/versioned", 4, marker=True)
    proxy.inject(fault, count=100, path_contains="/versioned/3/model.onnx")
    report = await src.sync()
    assert set(report.errors) == {"versioned/3"} and detail in report.errors["versioned/3"]
    assert "after 4 attempts" in report.errors["versioned/3"]
    assert cached_versions(src.root) == {"versioned": [1, 2, 4]} and staging_is_empty(src)

    proxy.clear()
    report = await src.sync()
    assert report.errors == {} and cached_versions(src.root) == {"versioned": [1, 2, 3, 4]}
    assert (src.root / "versioned" / "3" / "model.onnx").read_bytes() == onnx_bytes(3)


async def test_slowdown_is_retried_with_backoff(s3: S3Helper, proxy: FaultProxy, tmp_path: Path) -> None:
    s3.put_versioned("repo/versioned", [1])
    src = through(proxy, tmp_path)
    proxy.inject("slowdown", count=3, method=None)  # the next 3 requests, whatever they are

    report = await src.sync()

    assert proxy.delivered("slowdown") == 3
    assert report.error == "" and report.errors == {} and cached_versions(src.root) == {"versioned": [1]}


@pytest.mark.parametrize("fault", ["drop", "cut"])
async def test_broken_connections_are_retried(s3: S3Helper, proxy: FaultProxy, tmp_path: Path, fault: Fault) -> None:
    s3.put_versioned("repo/versioned", [1])
    src = through(proxy, tmp_path)
    proxy.inject(fault, count=2, path_contains="/versioned/1/model.onnx")

    report = await src.sync()

    assert proxy.delivered(fault) == 2
    assert report.errors == {} and (src.root / "versioned" / "1" / "model.onnx").read_bytes() == onnx_bytes(1)


async def test_outage_reports_unreachable_keeps_cache_and_recovers(s3: S3Helper, tmp_path: Path) -> None:
    s3.put_versioned("repo/versioned", [1])
    host_port = s3.endpoint_url.removeprefix("http://")
    src = S3Source(f"s3://{host_port}/models/repo", tmp_path / "cache", FAST, settle_secs=0.1)
    await src.sync()
    before = cached_versions(src.root)

    s3.server.stop()
    report = await src.sync()
    assert report.error.startswith(f"storage unreachable: {s3.endpoint_url}"), report.error
    assert not report.changed and cached_versions(src.root) == before == {"versioned": [1]}

    s3.server.start()
    s3.put_version("repo/versioned", 2, marker=True)
    report = await src.sync()
    assert report.error == "" and report.errors == {} and cached_versions(src.root) == {"versioned": [1, 2]}
