from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from ensemble_runtime.config.model_config import (
    ConfigError,
    apply_defaults,
    backend_of,
    check_config,
    model_filename,
    parse_config_override,
    parse_config_text,
)
from ensemble_runtime.config.onnx_autocomplete import autocomplete
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2 as mc


def test_parse_and_defaults() -> None:
    config = apply_defaults(parse_config_text('platform: "onnxruntime_onnx" max_batch_size: 8'), "m")
    assert config.name == "m"
    assert backend_of(config) == "onnxruntime"
    assert model_filename(config) == "model.onnx"
    assert config.version_policy.latest.num_versions == 1
    assert len(config.instance_group) == 1 and config.instance_group[0].count == 1
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    check_config(config, "m")


def test_default_model_filename_honoured() -> None:
    config = apply_defaults(parse_config_text('backend: "onnxruntime" default_model_filename: "net.onnx"'), "m")
    assert model_filename(config) == "net.onnx"
    assert config.platform == "onnxruntime_onnx"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('backend: "tensorflow"', "unknown backend 'tensorflow'"),
        ('platform: "pytorch_libtorch"', "no backend or platform"),
        ('name: "other" backend: "python"', "does not match its directory 'm'"),
        ('backend: "python" input [{ name: "x" dims: [1] }]', "input 'x' has no data_type"),
        ('backend: "python" input [{ name: "x" data_type: TYPE_FP32 dims: [0] }]', "invalid dimension 0"),
        ('backend: "python" input [{ name: "x" data_type: 99 dims: [1] }]', "input 'x' has unknown data_type 99"),
        (
            'backend: "python" input [{ name: "x" data_type: TYPE_FP32 dims: [1] }, '
            '{ name: "x" data_type: TYPE_FP32 dims: [1] }]',
            "input 'x' is declared twice",
        ),
        (
            'backend: "python" max_batch_size: 4 dynamic_batching { preferred_batch_size: [8] }',
            "preferred_batch_size 8 exceeds max_batch_size 4",
        ),
    ],
)
def test_check_config_refuses(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_config(apply_defaults(parse_config_text(text), "m"), "m")


def test_parse_error_names_file() -> None:
    with pytest.raises(ConfigError, match=r"config\.pbtxt.*max_batch_sizes"):
        parse_config_text("max_batch_sizes: 3", "m/config.pbtxt")


def test_a_value_the_field_cannot_hold_is_a_config_error() -> None:
    """protobuf's text parser raises a bare ValueError for an enum number past 32 bits (found by fuzz_config)."""
    with pytest.raises(ConfigError, match=r"m/config\.pbtxt: Value out of range"):
        parse_config_text('input [{ name: "x" data_type: 666666666666666666666666666616 }]', "m/config.pbtxt")


def test_override_accepts_json() -> None:
    config = parse_config_override('{"backend": "python", "max_batch_size": 2}', "load request")
    assert config.backend == "python" and config.max_batch_size == 2
    with pytest.raises(ConfigError, match="load request"):
        parse_config_override('{"backend": 3, "nope": 1}', "load request")


def _write_onnx(path: Path, batch_dim: str | int) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch_dim, 4])
    flag = helper.make_tensor_value_info("flag", TensorProto.BOOL, [batch_dim, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch_dim, 4])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x, flag], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_autocomplete_from_graph_with_batching(tmp_path: Path) -> None:
    _write_onnx(tmp_path / "model.onnx", "N")
    config = autocomplete(apply_defaults(parse_config_text('platform: "onnxruntime_onnx"'), "m"), tmp_path / "model.onnx")
    assert config.max_batch_size == 4
    assert config.HasField("dynamic_batching")
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("x", mc.TYPE_FP32, [4]),
        ("flag", mc.TYPE_BOOL, [2]),
    ]
    assert [(t.name, list(t.dims)) for t in config.output] == [("y", [4])]


def test_autocomplete_fixed_batch_keeps_full_dims(tmp_path: Path) -> None:
    _write_onnx(tmp_path / "model.onnx", 1)
    config = autocomplete(apply_defaults(parse_config_text('platform: "onnxruntime_onnx"'), "m"), tmp_path / "model.onnx")
    assert config.max_batch_size == 0
    assert list(config.input[0].dims) == [1, 4]


def test_autocomplete_broken_onnx(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(ConfigError, match="not a readable ONNX model"):
        autocomplete(apply_defaults(parse_config_text('platform: "onnxruntime_onnx"'), "m"), tmp_path / "model.onnx")
