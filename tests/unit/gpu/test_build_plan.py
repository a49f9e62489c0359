"""`ensemble-build-plan`: argument and shape parsing, checks against the ONNX graph, and its exits without TensorRT."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import onnx
import pytest
from ensemble_examples import onnx_models
from ensemble_runtime.tools.build_plan import (
    PlanError,
    check_onnx,
    check_profile,
    is_quantized,
    main,
    parse_args,
    parse_shapes,
)
from onnx import TensorProto, helper

TRT_INSTALLED = importlib.util.find_spec("tensorrt") is not None


def test_parse_shapes() -> None:
    assert parse_shapes("input:1x3x224x224,mask:1X128") == {"input": (1, 3, 224, 224), "mask": (1, 128)}
    assert parse_shapes("ns:input:4, ") == {"ns:input": (4,)}
    assert parse_shapes("") == {}
    for bad, message in [("input", "is not name:shape"), (":1x2", "is not name:shape"),
                         ("x:1x?x3", "is not dimensions joined by 'x'"), ("x:0x3", "has a zero dimension"),
                         ("x:1,x:2", "input 'x' is given twice"), ("x:-1x3", "is not dimensions")]:
        with pytest.raises(PlanError, match=message):
            parse_shapes(bad)


def test_check_profile() -> None:
    check_profile({"x": (1, 3)}, {"x": (8, 3)}, {"x": (64, 3)})
    with pytest.raises(PlanError, match="input 'x' has no --opt/--max-shapes"):
        check_profile({"x": (1, 3)}, {}, {})
    with pytest.raises(PlanError, match="differ in rank"):
        check_profile({"x": (1, 3)}, {"x": (8, 3)}, {"x": (64,)})
    with pytest.raises(PlanError, match="need min <= opt <= max in every dimension, got min 1x3, opt 8x3, max 4x3"):
        check_profile({"x": (1, 3)}, {"x": (8, 3)}, {"x": (4, 3)})


def test_parse_args_defaults_and_flags(tmp_path: Path) -> None:
    options = parse_args([str(tmp_path / "m.onnx"), "--min-shapes", "x:1x4", "--opt-shapes", "x:8x4",
                          "--max-shapes", "x:64x4", "--fp16", "--workspace-mib", "512", "--profiles", "2"])
    assert options.output == tmp_path / "model.plan"
    assert (options.min_shapes, options.opt_shapes, options.max_shapes) == ({"x": (1, 4)}, {"x": (8, 4)}, {"x": (64, 4)})
    assert options.fp16 and not options.int8 and options.workspace_mib == 512 and options.profiles == 2
    static = parse_args(["m.onnx", "--shapes", "x:2x4", "--max-shapes", "x:4x4", "-o", "out/p.plan"])
    assert static.min_shapes == {"x": (2, 4)} and static.max_shapes == {"x": (4, 4)} and static.output == Path("out/p.plan")
    with pytest.raises(PlanError, match="--workspace-mib must be positive"):
        parse_args(["m.onnx", "--workspace-mib", "0"])
    with pytest.raises(PlanError, match="--profiles must be at least 1"):
        parse_args(["m.onnx", "--profiles", "0"])


def _add_sub(tmp_path: Path) -> Path:
    path = tmp_path / "add_sub.onnx"
    onnx_models.save(onnx_models.add_sub(), path)
    return path


def test_shapes_are_checked_against_the_onnx_inputs(tmp_path: Path) -> None:
    path = str(_add_sub(tmp_path))
    both = "INPUT0:{b}x16,INPUT1:{b}x16"
    check_onnx(parse_args([path, "--min-shapes", both.format(b=1), "--opt-shapes", both.format(b=8),
                           "--max-shapes", both.format(b=64)]))
    with pytest.raises(PlanError, match=r"input 'INPUT0' has dynamic shape \?x16: give it --min-shapes"):
        check_onnx(parse_args([path]))
    with pytest.raises(PlanError, match=r"INPUT9 is not an input of add_sub.onnx"):
        check_onnx(parse_args([path, "--shapes", "INPUT9:1x16"]))
    with pytest.raises(PlanError, match=r"input 'INPUT0': min shape 1x15 does not fit the ONNX shape \?x16"):
        check_onnx(parse_args([path, "--shapes", "INPUT0:1x15,INPUT1:1x16"]))
    with pytest.raises(PlanError, match="no such file"):
        check_onnx(parse_args([str(tmp_path / "missing.onnx")]))


def _quantized(tmp_path: Path) -> Path:
    scale = helper.make_tensor("s", TensorProto.FLOAT, [], [0.1])
    zero = helper.make_tensor("z", TensorProto.INT8, [], [0])
    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]), helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])],
        "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [scale, zero])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    path = tmp_path / "qdq.onnx"
    onnx.save(model, str(path))
    return path


def test_int8_needs_a_quantized_onnx(tmp_path: Path) -> None:
    path = _add_sub(tmp_path)
    shapes = ["--shapes", "INPUT0:1x16,INPUT1:1x16"]
    with pytest.raises(PlanError, match=r"--int8 without calibration needs a quantized ONNX, and add_sub.onnx has no "
                                        "QuantizeLinear/DequantizeLinear nodes"):
        check_onnx(parse_args([str(path), "--int8", *shapes]))
    quantized = _quantized(tmp_path)
    assert is_quantized(onnx.load(str(quantized))) and not is_quantized(onnx.load(str(path)))
    check_onnx(parse_args([str(quantized), "--int8"]))


def test_main_exit_codes_and_messages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "nope.onnx")]) == 2
    assert "ensemble-build-plan: " in capsys.readouterr().err
    if TRT_INSTALLED:
        return
    path = _add_sub(tmp_path)
    assert main([str(path), "--shapes", "INPUT0:1x16,INPUT1:1x16"]) == 3
    err = capsys.readouterr().err
    assert "the tensorrt package is not installed; install the tensorrt extra" in err
    assert not (tmp_path / "model.plan").exists()
