"""Model repositories for benchmarks that run against more than one server (ours and the real Triton).

`build_chain_repository` writes python ensembles of `add_one` steps (FP32 [16], `max_batch_size: 0`, no
dynamic batching, one instance per step). `build_text_repository` writes the `text_pipeline` example, with
the ONNX `text_scorer` swapped for the equivalent python model (`text_scorer.py`, same weights) when asked:
the Triton peer from the nvidia-pytriton wheel has only the python backend.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CHAIN_LENGTHS = (2, 4)
TENSOR = "data_type: TYPE_FP32 dims: [ 16 ]"


def chain_name(length: int) -> str:
    return f"chain{length}"


def step_name(index: int) -> str:
    return f"add_one_{index}"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _add_one_config(name: str, instances: int, decoupled: bool) -> str:
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        f'input [ {{ name: "X" {TENSOR} }} ]\noutput [ {{ name: "Y" {TENSOR} }} ]\n'
        f'instance_group [ {{ count: {instances} kind: KIND_CPU }} ]\n'
        + ("model_transaction_policy { decoupled: true }\n" if decoupled else "")
    )


def build_add_one(root: Path, name: str, instances: int = 1, decoupled: bool = False) -> None:
    """`name`: the `add_one` python model (Y = X + 1) with `instances` instances (no dynamic batching);
    `decoupled`: `add_one_decoupled.py`, which sends that response and then the final flag alone."""
    _write(root / name / "config.pbtxt", _add_one_config(name, instances, decoupled))
    (root / name / "1").mkdir(parents=True, exist_ok=True)
    source = "add_one_decoupled.py" if decoupled else "add_one.py"
    shutil.copyfile(HERE / source, root / name / "1" / "model.py")


def _chain_config(length: int) -> str:
    tensors = ["IN", *[f"t{i}" for i in range(length - 1)], "OUT"]
    steps = "\n".join(
        f'    {{ model_name: "{step_name(i)}" model_version: -1 input_map {{ key: "X" value: "{tensors[i]}" }} '
        f'output_map {{ key: "Y" value: "{tensors[i + 1]}" }} }}{"," if i < length - 1 else ""}'
        for i in range(length)
    )
    return (
        f'name: "{chain_name(length)}"\nplatform: "ensemble"\nmax_batch_size: 0\n'
        f'input [ {{ name: "IN" {TENSOR} }} ]\noutput [ {{ name: "OUT" {TENSOR} }} ]\n'
        f"ensemble_scheduling {{\n  step [\n{steps}\n  ]\n}}\n"
    )


def build_chain_repository(root: Path, lengths: Sequence[int] = CHAIN_LENGTHS) -> list[str]:
    """`chain<N>`: IN -> add_one_0 -> ... -> add_one_<N-1> -> OUT (= IN + N). Returns the ensemble names."""
    for index in range(max(lengths)):
        build_add_one(root, step_name(index))
    for length in lengths:
        _write(root / chain_name(length) / "config.pbtxt", _chain_config(length))
        (root / chain_name(length) / "1").mkdir(exist_ok=True)
    return [chain_name(n) for n in lengths]


def build_text_repository(root: Path, python_scorer: bool) -> list[str]:
    """`text_pipeline` (tokenizer -> text_scorer -> threshold), with a python `text_scorer` if asked."""
    from ensemble_examples.repository import build_repository

    build_repository(root, only=["text_pipeline"])
    if python_scorer:
        _python_text_scorer(root / "text_scorer")
    return ["text_pipeline"]


def _python_text_scorer(model_dir: Path) -> None:
    import onnx
    from onnx import numpy_helper

    onnx_path = model_dir / "1" / "model.onnx"
    weights = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(onnx_path)).graph.initializer}
    buffer = io.BytesIO()
    np.savez(buffer, embedding=weights["embedding"], fc_w=weights["fc_w"], fc_b=weights["fc_b"])
    (model_dir / "1" / "weights.npz").write_bytes(buffer.getvalue())
    onnx_path.unlink()
    shutil.copyfile(HERE / "text_scorer.py", model_dir / "1" / "model.py")
    config_path = model_dir / "config.pbtxt"
    config = config_path.read_text(encoding="utf-8")
    platform = 'platform: "onnxruntime_onnx"'
    if platform not in config:
        raise ValueError(f"{config_path}: expected an ONNX text_scorer ({platform})")
    config_path.write_text(config.replace(platform, 'backend: "python"'), encoding="utf-8")


INLINE = '\nparameters { key: "EXECUTE_INLINE" value: { string_value: "true" } }\n'


def mark_inline(root: Path) -> list[str]:
    """Opt every Python model of the repository into running `execute` on the event loop (our runtime's
    EXECUTE_INLINE parameter; Triton ignores unknown parameters, so both servers still load the same files)."""
    marked: list[str] = []
    for config_path in sorted(root.glob("*/config.pbtxt")):
        text = config_path.read_text(encoding="utf-8")
        if 'backend: "python"' in text and "EXECUTE_INLINE" not in text:
            config_path.write_text(text + INLINE, encoding="utf-8")
            marked.append(config_path.parent.name)
    return marked


CACHED = "\nresponse_cache { enable: true }\n"


def mark_cached(root: Path) -> list[str]:
    """Enable Triton's response cache in every model and ensemble of the repository (both servers read it; each
    caches only when started with --cache-config)."""
    marked: list[str] = []
    for config_path in sorted(root.glob("*/config.pbtxt")):
        text = config_path.read_text(encoding="utf-8")
        if "response_cache" not in text:
            config_path.write_text(text + CACHED, encoding="utf-8")
            marked.append(config_path.parent.name)
    return marked


ONNX_MODEL = "add_sub"
ONNX_INSTANCES = 2
_ADD_SUB_TENSOR = "data_type: TYPE_FP32 dims: [ 16 ]"


def build_onnx_repository(root: Path) -> Path:
    """`add_sub` (Triton's quickstart ONNX model: INPUT0, INPUT1 FP32 [-1,16] -> sum, difference), max batch 8,
    `ONNX_INSTANCES` CPU instances, for our runtime only (the Triton peer has no ONNX Runtime backend).
    Returns the model file, for calling ONNX Runtime on it directly."""
    from ensemble_examples import onnx_models

    config = (
        f'name: "{ONNX_MODEL}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        f'input [ {{ name: "INPUT0" {_ADD_SUB_TENSOR} }}, {{ name: "INPUT1" {_ADD_SUB_TENSOR} }} ]\n'
        f'output [ {{ name: "OUTPUT0" {_ADD_SUB_TENSOR} }}, {{ name: "OUTPUT1" {_ADD_SUB_TENSOR} }} ]\n'
        f"instance_group [ {{ count: {ONNX_INSTANCES} kind: KIND_CPU }} ]\n"
    )
    _write(root / ONNX_MODEL / "config.pbtxt", config)
    model_path = root / ONNX_MODEL / "1" / "model.onnx"
    model_path.parent.mkdir(parents=True, exist_ok=True)
    onnx_models.save(onnx_models.add_sub(), model_path)
    return model_path
