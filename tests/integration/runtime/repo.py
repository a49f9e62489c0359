"""The model repository the runtime integration tests serve: good models next to broken ones."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
from ensemble_examples import onnx_models
from onnx import TensorProto, helper

MODELS = Path(__file__).parent / "models"

ADD_SUB_CONFIG = """
name: "add_sub"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

PY_ADD_SUB_CONFIG = """
name: "py_add_sub"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "INFO" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""

PY_FAIL_CONFIG = """
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""

VERSIONED_CONFIG = """
platform: "onnxruntime_onnx"
max_batch_size: 8
version_policy: { latest: { num_versions: 2 } }
"""


def _types_model() -> onnx.ModelProto:
    names = {"fp16": TensorProto.FLOAT16, "int8": TensorProto.INT8, "flag": TensorProto.BOOL, "text": TensorProto.STRING}
    inputs = [helper.make_tensor_value_info(f"{n}_in", t, ["batch", 2]) for n, t in names.items()]
    outputs = [helper.make_tensor_value_info(f"{n}_out", t, ["batch", 2]) for n, t in names.items()]
    nodes = [helper.make_node("Identity", [f"{n}_in"], [f"{n}_out"]) for n in names]
    graph = helper.make_graph(nodes, "types", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _model(root: Path, name: str, config: str | None, files: dict[str, bytes | Path]) -> None:
    directory = root / name
    (directory / "1").mkdir(parents=True)
    if config is not None:
        (directory / "config.pbtxt").write_text(config)
    for rel, content in files.items():
        target = directory / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copy(content, target)
        else:
            target.write_bytes(content)


def build(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    add_sub = onnx_models.add_sub().SerializeToString()
    _model(root, "add_sub", ADD_SUB_CONFIG, {"1/model.onnx": add_sub})
    _model(root, "add_sub_noconfig", None, {"1/model.onnx": add_sub})
    _model(root, "types", 'platform: "onnxruntime_onnx"', {"1/model.onnx": _types_model().SerializeToString()})
    _model(root, "py_add_sub", PY_ADD_SUB_CONFIG, {"1/model.py": MODELS / "py_add_sub" / "model.py"})
    _model(root, "py_fail", PY_FAIL_CONFIG, {"1/model.py": MODELS / "py_fail" / "model.py"})
    _model(root, "versioned", VERSIONED_CONFIG, {f"{v}/model.onnx": onnx_models.versioned(v).SerializeToString() for v in (1, 2, 3)})
    _model(root, "py_slow", PY_FAIL_CONFIG, {"1/model.py": MODELS / "py_slow" / "model.py"})
    # broken models, each next to the good ones
    _model(root, "bad_syntax", "platform: onnxruntime_onnx\" max_batch_size: [", {"1/model.onnx": add_sub})
    _model(root, "unknown_backend", 'backend: "tensorflow"', {"1/model.savedmodel": b""})
    _model(root, "missing_file", 'platform: "onnxruntime_onnx"', {"1/other.bin": b"x"})
    _model(root, "broken_onnx", 'platform: "onnxruntime_onnx" max_batch_size: 0 '
           'input [ { name: "x" data_type: TYPE_FP32 dims: [1] } ] output [ { name: "y" data_type: TYPE_FP32 dims: [1] } ]',
           {"1/model.onnx": b"\x08\x07garbage-not-onnx"})
    _model(root, "init_fails", PY_FAIL_CONFIG, {"1/model.py": MODELS / "py_init_fails" / "model.py"})
    return root


BROKEN = {
    "bad_syntax": "config.pbtxt",
    "unknown_backend": "unknown backend 'tensorflow'",
    "missing_file": "model file 'model.onnx' not found",
    "broken_onnx": "model.onnx",
    "init_fails": "cannot open the tokenizer vocabulary",
}


def held_model(root: Path) -> None:
    """`py_held` in `root`: an execution that waits for the test (models/py_held/model.py)."""
    _model(root, "py_held", PY_FAIL_CONFIG, {"1/model.py": MODELS / "py_held" / "model.py"})


ECHO_CONFIG = """
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def echo_model(root: Path) -> None:
    """`echo` in `root`: ONNX Identity of an FP32 vector of any length (an answer as large as its request)."""
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "echo",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    _model(root, "echo", ECHO_CONFIG, {"1/model.onnx": model.SerializeToString()})


GENERATE_CONFIGS = {
    "echo_text": """
backend: "python"
max_batch_size: 0
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
""",
    "numbers": """
backend: "python"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] },
        { name: "k" data_type: TYPE_INT32 dims: [ 1 ] optional: true },
        { name: "flag" data_type: TYPE_BOOL dims: [ 1 ] optional: true } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "n" data_type: TYPE_INT64 dims: [ 1 ] },
         { name: "described" data_type: TYPE_STRING dims: [ 1 ] } ]
""",
    "tokens": """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
        { name: "count" data_type: TYPE_INT32 dims: [ 1 ] optional: true },
        { name: "hold" data_type: TYPE_BOOL dims: [ 1 ] optional: true } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
""",
}


def generate_models(root: Path) -> None:
    """The generate extension's models in `root` (models/generate/): `echo_text` (text in, text out, echoing the
    request's parameters and id), `numbers` (a batching model of numbers and booleans), `tokens` (decoupled: a
    response per token; `hold` waits for GENERATE_GATE_DIR/release after the first)."""
    for name, config in GENERATE_CONFIGS.items():
        _model(root, name, f'name: "{name}"\n{config}', {"1/model.py": MODELS / "generate" / f"{name}.py"})


METRICS_CONFIG = """
backend: "python"
max_batch_size: 0
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ -1 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "MISUSES" data_type: TYPE_STRING dims: [ -1 ] }
]
"""


def metrics_model(root: Path, misuses: str = "all") -> None:
    """`py_metrics` in `root`: add/sub with its own metric families (models/py_metrics/model.py); `misuses`
    "stub": it tries only the misuses Triton's python stub refuses itself."""
    parameters = f'parameters {{ key: "MISUSES" value: {{ string_value: "{misuses}" }} }}'
    _model(root, "py_metrics", METRICS_CONFIG + parameters, {"1/model.py": MODELS / "py_metrics" / "model.py"})
