"""RepositoryConfigSource: the operator's JSON file, models from different S3 prefixes, overrides, ensembles."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from ensemble_examples.repository import python_model_source
from ensemble_runtime.config.model_config import parse_config_text
from ensemble_runtime.repository.config_source import RepositoryConfigSource
from google.protobuf import text_format

from tests.integration.s3.helpers import FAST, S3Helper, cached_versions, ensemble_config, onnx_bytes

pytestmark = [pytest.mark.s3, pytest.mark.asyncio]

OVERRIDE = 'name: "anything"\nbackend: "python"\nmax_batch_size: 4\nversion_policy { all {} }\n'


async def test_models_from_prefixes_with_override_and_ensemble(s3: S3Helper, tmp_path: Path) -> None:
    s3.client.create_bucket(Bucket="team-b")
    s3.put_versioned("team-a/versioned", [1, 2], policy="latest { num_versions: 1 }")
    s3.put("scoring/threshold/1/model.py", python_model_source("threshold"), bucket="team-b")
    s3.put("scoring/threshold/2/model.py", python_model_source("threshold"), bucket="team-b")
    path = tmp_path / "repository.json"
    spec: dict[str, object] = {
        "models": [
            {"name": "pre", "source": "s3://models/team-a/versioned"},
            {"name": "score", "source": "s3://team-b/scoring/threshold", "config_pbtxt": OVERRIDE},
        ],
        "ensembles": [{"name": "pipe", "config_pbtxt": ensemble_config("whatever")}],
        "s3": {"endpoint_url": s3.endpoint_url},
    }
    path.write_text(json.dumps(spec))
    src = RepositoryConfigSource(path, tmp_path / "cache", FAST, settle_secs=0.1)

    report = await src.sync()

    assert report.error == "" and report.errors == {}, report
    assert src.config_digest == hashlib.sha256(path.read_bytes()).hexdigest()  # what the operator compares
    assert report.models_changed == {"pre", "score", "pipe"}
    assert cached_versions(src.root) == {"pre": [2], "score": [1, 2], "pipe": [1]}
    assert (src.root / "pre" / "2" / "model.onnx").read_bytes() == onnx_bytes(2)
    score = parse_config_text((src.root / "score" / "config.pbtxt").read_text())
    assert score.name == "score" and score.max_batch_size == 4  # the override, renamed
    pipe = parse_config_text((src.root / "pipe" / "config.pbtxt").read_text())
    assert pipe.name == "pipe" and pipe.platform == "ensemble" and list((src.root / "pipe" / "1").iterdir()) == []
    assert not (await src.sync()).changed

    # The ConfigMap changes: the override goes (the source has no config.pbtxt), the ensemble is dropped.
    spec["models"] = [spec["models"][0], {"name": "score", "source": "s3://team-b/scoring/threshold"}]  # type: ignore[index]
    spec["ensembles"] = []
    path.write_text(json.dumps(spec))
    report = await src.sync(in_use=[("pipe", 1)])
    applied = hashlib.sha256(path.read_bytes()).hexdigest()
    assert src.config_digest == applied
    assert report.errors == {} and (src.root / "pipe" / "1").is_dir()  # in use: kept for now
    assert not (src.root / "score" / "config.pbtxt").exists()
    assert cached_versions(src.root)["score"] == [2]  # default policy without a config: latest 1
    report = await src.sync()
    assert "pipe" in report.models_changed and "pipe" not in cached_versions(src.root)

    path.write_text(json.dumps(spec)[:-3])
    report = await src.sync()
    assert report.error.startswith(f"{path}: malformed JSON") and not report.changed
    assert src.config_digest == applied  # still the last file it could apply
    assert cached_versions(src.root) == {"pre": [2], "score": [2]}
    assert text_format.MessageToString(score)  # the parsed override stays a valid ModelConfig


async def test_explicit_load_sees_a_version_uploaded_since_the_last_poll(s3: S3Helper, tmp_path: Path) -> None:
    """`settle=True` lists twice now for models already listed too, as S3Source does (it compared them with the
    previous poll's listing, so an explicit load missed a version uploaded since that poll)."""
    s3.put_versioned("team-a/versioned", [1])
    path = tmp_path / "repository.json"
    spec = {
        "models": [{"name": "pre", "source": "s3://models/team-a/versioned"}],
        "s3": {"endpoint_url": s3.endpoint_url},
    }
    path.write_text(json.dumps(spec))
    src = RepositoryConfigSource(path, tmp_path / "cache", FAST, settle_secs=0.1)
    await src.sync()
    s3.put_version("team-a/versioned", 2)  # no marker

    report = await src.sync(["pre"], settle=True)

    assert report.errors == {} and report.models_changed == {"pre"}
    assert cached_versions(src.root) == {"pre": [1, 2]}


async def test_unreachable_storage_is_a_global_error(s3: S3Helper, tmp_path: Path) -> None:
    s3.put_versioned("team-a/versioned", [1])
    path = tmp_path / "repository.json"
    spec = {
        "models": [{"name": "pre", "source": "s3://models/team-a/versioned"}],
        "s3": {"endpoint_url": s3.endpoint_url},
    }
    path.write_text(json.dumps(spec))
    src = RepositoryConfigSource(path, tmp_path / "cache", FAST, settle_secs=0.1)
    await src.sync()
    s3.server.stop()
    report = await src.sync()
    assert report.error.startswith("storage unreachable:") and "pre" in report.errors
    assert cached_versions(src.root) == {"pre": [1]}
