"""S3Source against a real MinIO: layout, completeness, policies, ensembles, removal, endpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
from ensemble_examples import configs
from ensemble_examples.repository import python_model_source
from ensemble_runtime.config.model_config import apply_defaults, check_config, read_config
from ensemble_runtime.repository.sources import S3Source

from tests.integration.s3.helpers import FAST, S3Helper, cached_versions, ensemble_config, onnx_bytes, versioned_config

pytestmark = [pytest.mark.s3, pytest.mark.asyncio]


def source(s3: S3Helper, tmp_path: Path, prefix: str = "repo") -> S3Source:
    """Triton's URI form, s3://host:port/bucket/prefix: the endpoint comes from the URI."""
    host_port = s3.endpoint_url.removeprefix("http://")
    return S3Source(f"s3://{host_port}/models/{prefix}", tmp_path / "cache", FAST, settle_secs=0.1)


async def test_sync_materialises_triton_layout(s3: S3Helper, tmp_path: Path) -> None:
    s3.put_versioned("repo/versioned", [1, 2, 3], policy="latest { num_versions: 2 }")
    s3.put_python("repo/threshold")
    s3.put("repo/README.md", "not a model")
    src = source(s3, tmp_path)

    report = await src.sync()  # first sync: lists twice, settle_secs apart, so all versions count as complete

    assert report.error == "" and report.errors == {}, report
    assert report.changed and report.models_changed == {"versioned", "threshold"}
    assert cached_versions(src.root) == {"versioned": [2, 3], "threshold": [1]}
    assert (src.root / "versioned" / "3" / "model.onnx").read_bytes() == onnx_bytes(3)
    assert (src.root / "versioned" / "config.pbtxt").read_text() == versioned_config("latest { num_versions: 2 }")
    assert (src.root / "threshold" / "1" / "model.py").read_text() == python_model_source("threshold")
    for name in ("versioned", "threshold"):  # what the manager will do with them
        config = read_config(src.root / name)
        assert config is not None
        check_config(apply_defaults(config, name), name)
    mtime = (src.root / "versioned" / "3" / "model.onnx").stat().st_mtime_ns

    again = await src.sync()
    assert not again.changed and again.errors == {} and again.error == ""
    assert (src.root / "versioned" / "3" / "model.onnx").stat().st_mtime_ns == mtime  # not downloaded again


async def test_version_without_marker_appears_after_two_identical_listings(s3: S3Helper, tmp_path: Path) -> None:
    s3.put_versioned("repo/versioned", [1])
    src = source(s3, tmp_path)
    await src.sync()
    s3.put_version("repo/versioned", 2)  # uploaded between polls, no marker

    first = await src.sync()
    assert not first.changed and cached_versions(src.root) == {"versioned": [1]}  # seen once: may be partial

    second = await src.sync()
    assert second.models_changed == {"versioned"} and cached_versions(src.root) == {"versioned": [1, 2]}


async def test_version_still_changing_is_not_loaded(s3: S3Helper, tmp_path: Path) -> None:
    s3.put_versioned("repo/versioned", [1])
    src = source(s3, tmp_path)
    await src.sync()
    s3.put("repo/versioned/2/model.onnx", b"partial")
    await src.sync()
    s3.put("repo/versioned/2/model.onnx", onnx_bytes(2))  # the listing changed again: still uploading
    assert not (await src.sync()).changed
    assert cached_versions(src.root) == {"versioned": [1]}
    await src.sync()
    assert (src.root / "versioned" / "2" / "model.onnx").read_bytes() == onnx_bytes(2)


async def test_version_with_complete_marker_appears_at_once(s3: S3Helper, tmp_path: Path) -> None:
    s3.put_versioned("repo/versioned", [1])
    src = source(s3, tmp_path)
    await src.sync()
    s3.put_version("repo/versioned", 2, marker=True)

    report = await src.sync()

    assert report.models_changed == {"versioned"} and cached_versions(src.root) == {"versioned": [1, 2]}
    assert sorted(p.name for p in (src.root / "versioned" / "2").iterdir()) == ["model.onnx"]  # marker not copied


async def test_policy_change_latest_two_to_specific_one(s3: S3Helper, tmp_path: Path) -> None:
    s3.put_versioned("repo/versioned", [1, 2, 3], policy="latest { num_versions: 2 }")
    src = source(s3, tmp_path)
    await src.sync()
    assert cached_versions(src.root) == {"versioned": [2, 3]}

    s3.put("repo/versioned/config.pbtxt", versioned_config("specific { versions: [1] }"))
    report = await src.sync()

    assert report.errors == {} and report.models_changed == {"versioned"}
    assert cached_versions(src.root) == {"versioned": [1]}
    assert "specific" in (src.root / "versioned" / "config.pbtxt").read_text()


async def test_deleted_version_in_use_stays_until_released(s3: S3Helper, tmp_path: Path) -> None:
    s3.put_versioned("repo/versioned", [1, 2])
    src = source(s3, tmp_path)
    await src.sync()
    s3.delete_prefix("repo/versioned/2/")

    kept = await src.sync(in_use=[("versioned", 1), ("versioned", 2)])
    assert not kept.changed and cached_versions(src.root) == {"versioned": [1, 2]}

    released = await src.sync(in_use=[("versioned", 1)])
    assert released.models_changed == {"versioned"} and cached_versions(src.root) == {"versioned": [1]}


async def test_model_deleted_from_s3_is_removed(s3: S3Helper, tmp_path: Path) -> None:
    s3.put_versioned("repo/versioned", [1])
    s3.put_python("repo/threshold")
    src = source(s3, tmp_path)
    await src.sync()
    s3.delete_prefix("repo/threshold/")

    assert not (await src.sync(in_use=[("threshold", 1)])).changed
    report = await src.sync()
    assert report.models_changed == {"threshold"} and cached_versions(src.root) == {"versioned": [1]}
    assert not (src.root / "threshold").exists()


async def test_corrupt_config_is_reported_for_that_model_only(s3: S3Helper, tmp_path: Path) -> None:
    s3.put_versioned("repo/versioned", [1])
    s3.put_python("repo/threshold")
    src = source(s3, tmp_path)
    await src.sync()
    s3.put("repo/threshold/config.pbtxt", "name: 'threshold'\nbackend: {{ not pbtxt")
    s3.put_version("repo/versioned", 2, marker=True)

    report = await src.sync()

    assert report.error == "" and set(report.errors) == {"threshold"}
    assert "threshold/config.pbtxt" in report.errors["threshold"]
    assert report.models_changed == {"versioned"}
    assert cached_versions(src.root) == {"versioned": [1, 2], "threshold": [1]}
    assert 'backend: "python"' in (src.root / "threshold" / "config.pbtxt").read_text()  # the previous one


async def test_ensemble_with_only_config_gets_empty_version_folder(s3: S3Helper, tmp_path: Path) -> None:
    s3.put_versioned("repo/versioned", [1])
    s3.put("repo/pipe/config.pbtxt", ensemble_config("pipe"))
    src = source(s3, tmp_path)

    report = await src.sync()

    assert report.errors == {} and cached_versions(src.root) == {"versioned": [1], "pipe": [1]}
    assert list((src.root / "pipe" / "1").iterdir()) == []
    assert (src.root / "pipe" / "config.pbtxt").read_text() == ensemble_config("pipe")


async def test_sync_named_models_only(s3: S3Helper, tmp_path: Path) -> None:
    s3.put_versioned("repo/versioned", [1])
    s3.put_python("repo/threshold")
    src = source(s3, tmp_path)
    report = await src.sync(models=["threshold"])
    assert report.models_changed == {"threshold"} and cached_versions(src.root) == {"threshold": [1]}


async def test_endpoint_from_aws_endpoint_url(s3: S3Helper, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """boto3 reads AWS_ENDPOINT_URL itself; the plain s3://bucket/prefix form then reaches MinIO."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint_url)
    s3.put_versioned("repo/versioned", [1])
    src = S3Source("s3://models/repo", tmp_path / "cache", FAST, settle_secs=0.1)
    report = await src.sync()
    assert report.error == "" and cached_versions(src.root) == {"versioned": [1]}


async def test_model_new_to_the_bucket_is_listed_twice_at_its_first_poll(s3: S3Helper, tmp_path: Path) -> None:
    """A model with no earlier listing is settled at once, at startup or when it appears later, as
    RepositoryConfigSource does for a model new to its file; a known model's new version waits for a second poll."""
    s3.put_versioned("repo/versioned", [1])
    src = source(s3, tmp_path)
    await src.sync()
    s3.put_python("repo/threshold")  # a new model, no marker
    s3.put_version("repo/versioned", 2)  # a known model's new version, no marker

    report = await src.sync()

    assert report.models_changed == {"threshold"}
    assert cached_versions(src.root) == {"versioned": [1], "threshold": [1]}


async def test_explicit_endpoint_setting(s3: S3Helper, tmp_path: Path) -> None:
    from dataclasses import replace

    s3.put_versioned("repo/versioned", [1])
    src = S3Source("s3://models/repo", tmp_path / "cache", replace(FAST, endpoint_url=s3.endpoint_url), settle_secs=0)
    assert (await src.sync()).error == "" and cached_versions(src.root) == {"versioned": [1]}
    assert configs.versioned().name == "versioned"
