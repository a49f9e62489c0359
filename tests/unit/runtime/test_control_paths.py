"""Pure rules behind repository control: config path confinement, model names, endpoint restrictions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ensemble_runtime.config.model_config import ConfigError
from ensemble_runtime.config.names import MAX_NAME_BYTES, valid_model_name
from ensemble_runtime.config.paths import Anchor, check_config_paths, config_paths, confined
from ensemble_runtime.protocol.restricted import GRPC_CATEGORIES, INFERENCE_SERVICE
from ensemble_runtime.restrictions import Category, Restriction, RestrictionError, parse_group, parse_restrictions
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb


def _config(**fields: object) -> mc.ModelConfig:
    config = mc.ModelConfig()
    json_format.ParseDict({"name": "m", "backend": "python", **fields}, config)
    return config


@pytest.fixture
def model(tmp_path: Path) -> Path:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "x.py").write_text("")
    version = tmp_path / "repo" / "m" / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text("")
    (version / "sub").mkdir()
    (version / "escape.py").symlink_to(tmp_path / "outside" / "x.py")
    (version / "inside.py").symlink_to(version / "model.py")
    return version.parent


@pytest.mark.parametrize("value,problem", [
    ("../x.py", "contains '..'"), ("sub/../../x.py", "contains '..'"), ("/etc/passwd", "is an absolute path"),
    ("~/x.py", "is an absolute path"), ("a\x00b", "NUL"), ("..\\x.py", "backslash"), (".", "names no file"),
    ("escape.py", "resolves outside"),
])
def test_confined_refuses_every_way_out(model: Path, value: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=f"model 'm': default_model_filename .* {problem}"):
        confined(model / "1", value, "default_model_filename", "m")


@pytest.mark.parametrize("value", ["model.py", "sub/model.py", "./model.py", "inside.py", "not-there-yet.py"])
def test_confined_accepts_paths_inside(model: Path, value: str) -> None:
    assert confined(model / "1", value, "default_model_filename", "m") == model / "1" / value


def test_config_paths_lists_every_path_field() -> None:
    config = _config(
        default_model_filename="a.py", cc_model_filenames={"8.0": "b.plan"},
        output=[{"name": "Y", "data_type": "TYPE_FP32", "dims": [1], "label_filename": "labels.txt"}],
        model_warmup=[{"name": "w", "inputs": {"X": {"data_type": "TYPE_FP32", "dims": [1], "input_data_file": "x"}}}],
        optimization={"execution_accelerators": {"gpu_execution_accelerator": [
            {"name": "tensorrt", "parameters": {"trt_engine_cache_path": "engines"}}]}},
    )
    assert [(p.value, p.anchor) for p in config_paths(config)] == [
        ("a.py", Anchor.VERSION), ("b.plan", Anchor.VERSION), ("labels.txt", Anchor.MODEL),
        ("x", Anchor.WARMUP), ("engines", Anchor.CACHE),
    ]


def test_check_config_paths_names_the_field(model: Path) -> None:
    check_config_paths(_config(default_model_filename="model.py"), model, [model / "1"])
    with pytest.raises(ConfigError, match=re.escape("output 'Y' label_filename '../../x' contains '..'")):
        check_config_paths(_config(output=[{"name": "Y", "data_type": "TYPE_FP32", "dims": [1],
                                            "label_filename": "../../x"}]), model, [model / "1"])
    with pytest.raises(ConfigError, match="trt_engine_cache_path '/tmp/e' is an absolute path"):
        check_config_paths(_config(optimization={"execution_accelerators": {"gpu_execution_accelerator": [
            {"name": "tensorrt", "parameters": {"trt_engine_cache_path": "/tmp/e"}}]}}), model, [])
    with pytest.raises(ConfigError, match=re.escape("default_model_filename 'escape.py' resolves outside")):
        check_config_paths(_config(default_model_filename="escape.py"), model, [model / "1"])


def test_model_names() -> None:
    for good in ("m", "my-model_2", "a.b", "модель", "n" * MAX_NAME_BYTES):
        assert valid_model_name(good), good
    for bad in ("", ".", "..", ".hidden", "a/b", "../x", "a\\b", "a\x00b", "a\nb", "n" * (MAX_NAME_BYTES + 1)):
        assert not valid_model_name(bad), bad


def test_parse_restrictions() -> None:
    assert parse_group("model-repository,statistics:X-Key=a=b") == (
        [Category.MODEL_REPOSITORY, Category.STATISTICS], "X-Key", "a=b")
    grpc = parse_restrictions(["health:k=v", "model-repository:admin=s"], grpc=True)
    assert grpc.by_category == {Category.HEALTH: Restriction("triton-grpc-protocol-k", "v"),
                                Category.MODEL_REPOSITORY: Restriction("triton-grpc-protocol-admin", "s")}
    assert parse_restrictions(["inference:Api-Key=v"], grpc=False).get(Category.INFERENCE) == Restriction("api-key", "v")
    assert parse_restrictions([], grpc=False).get(Category.INFERENCE) is None
    for bad, message in (("health", "expected"), ("health:k", "expected"), ("nope:k=v", "unknown category 'nope'"),
                         ("health:bad key=v", "not a valid header name"), ("health:k=", "empty value"),
                         ("health:k=$(TOKEN)", "unexpanded")):
        with pytest.raises(RestrictionError, match=message):
            parse_restrictions([bad], grpc=False)
    with pytest.raises(RestrictionError, match="more than one restricted group"):
        parse_restrictions(["health:a=1", "metadata,health:b=2"], grpc=False)


def test_restriction_compares_exactly_and_hides_its_value() -> None:
    r = Restriction("k", "secret")
    assert r.allows("secret")
    assert not any(r.allows(v) for v in (None, "", "secre", "secret ", "SECRET", "secretsecret"))
    assert "secret" not in repr(r)
    assert r.refusal("API") == "This API is restricted, expecting header 'k'"


def test_every_grpc_method_has_a_category() -> None:
    methods = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods
    assert {f"/{INFERENCE_SERVICE}/{m.name}" for m in methods} <= set(GRPC_CATEGORIES)
