"""The model repository NVIDIA's Python client examples expect, written by the project (nothing downloaded).

`triton-inference-server/client`'s `src/python/examples/*.py` run against Triton's QA models; this writes
models with the same names, tensors and configs, as Python models (sources in `triton_models/`), so the
examples run unchanged against ensemble-runtime and against Triton's Python backend alike:

    python -m ensemble_examples.triton_repository /tmp/triton-examples [--models simple simple_string ...]
    ensemble-runtime --model-repository=/tmp/triton-examples --server-name=triton

`simple`, `simple_int8` (INT32 / INT8 [16] add and subtract, max_batch_size 8), `simple_string` (the same on
integers written as text), `simple_identity` (BYTES), `custom_identity_int32`, `simple_sequence` and
`simple_dyna_sequence` (sequence batching with START/END/READY/CORRID control inputs), `repeat_int32`
(decoupled) and `densenet_onnx` (a stand-in image classifier with DenseNet's tensors and a 1000-line label
file: a Python model, so that the Python-only Triton peer serves it too).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

CONFIG_FILENAME = "config.pbtxt"
LABELS_FILENAME = "densenet_labels.txt"
CLASSES = 1000


def _add_sub(name: str, data_type: str) -> str:
    tensors = "\n".join(
        f'{kind} {{ name: "{tensor}" data_type: {data_type} dims: [ 16 ] }}'
        for kind, tensor in (("input", "INPUT0"), ("input", "INPUT1"), ("output", "OUTPUT0"), ("output", "OUTPUT1"))
    )
    return f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n{tensors}\n'


def _identity(name: str, data_type: str, max_batch_size: int) -> str:
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n'
        f'input {{ name: "INPUT0" data_type: {data_type} dims: [ -1 ] }}\n'
        f'output {{ name: "OUTPUT0" data_type: {data_type} dims: [ -1 ] }}\n'
    )


def _control(name: str, kind: str, data_type: str = "") -> str:
    if data_type:
        return f'control_input {{ name: "{name}" control {{ kind: {kind} data_type: {data_type} }} }}\n'
    return f'control_input {{ name: "{name}" control {{ kind: {kind} int32_false_true: [ 0, 1 ] }} }}\n'


def _sequence(name: str, dyna: bool) -> str:
    controls = _control("START", "CONTROL_SEQUENCE_START")
    if dyna:
        controls += _control("END", "CONTROL_SEQUENCE_END")
    controls += _control("READY", "CONTROL_SEQUENCE_READY")
    if dyna:
        controls += _control("CORRID", "CONTROL_SEQUENCE_CORRID", "TYPE_UINT64")
    strategy = "oldest { max_candidate_sequences: 4 }\n" if dyna else "direct { }\n"
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n'
        f"sequence_batching {{\nmax_sequence_idle_microseconds: 5000000\n{strategy}{controls}}}\n"
        'input { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }\n'
        'output { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }\n'
    )


def _repeat() -> str:
    return (
        'name: "repeat_int32"\nbackend: "python"\nmax_batch_size: 0\n'
        "model_transaction_policy { decoupled: true }\n"
        'input { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }\n'
        'input { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] }\n'
        'input { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] }\n'
        'output { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }\n'
        'output { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }\n'
    )


def _classifier() -> str:
    return (
        'name: "densenet_onnx"\nbackend: "python"\nmax_batch_size: 0\n'
        'input { name: "data_0" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 224, 224 ] }\n'
        f'output {{ name: "fc6_1" data_type: TYPE_FP32 dims: [ {CLASSES} ] label_filename: "{LABELS_FILENAME}" }}\n'
    )


def labels() -> list[str]:
    """The classifier's labels: line N names class N."""
    return [f"CLASS_{index:04d}" for index in range(CLASSES)]


@dataclass(frozen=True, slots=True)
class TritonExampleModel:
    name: str
    source: str  # triton_models/<source>/model.py
    config: str  # config.pbtxt text
    needs: str = ""  # the runtime feature it needs beyond plain inference ("" for none)


def example_models() -> tuple[TritonExampleModel, ...]:
    return (
        TritonExampleModel("simple", "add_sub", _add_sub("simple", "TYPE_INT32")),
        TritonExampleModel("simple_int8", "add_sub", _add_sub("simple_int8", "TYPE_INT8")),
        TritonExampleModel("simple_string", "string_add_sub", _add_sub("simple_string", "TYPE_STRING")),
        TritonExampleModel("simple_identity", "identity", _identity("simple_identity", "TYPE_STRING", 8)),
        TritonExampleModel("custom_identity_int32", "identity", _identity("custom_identity_int32", "TYPE_INT32", 1024)),
        TritonExampleModel("densenet_onnx", "image_classifier", _classifier()),
        TritonExampleModel("simple_sequence", "sequence", _sequence("simple_sequence", dyna=False), "sequence"),
        TritonExampleModel("simple_dyna_sequence", "sequence", _sequence("simple_dyna_sequence", dyna=True), "sequence"),
        TritonExampleModel("repeat_int32", "repeat", _repeat(), "decoupled"),
    )


MODEL_NAMES = tuple(m.name for m in example_models())


def build_triton_examples(root: Path, names: Sequence[str] | None = None) -> list[str]:
    """Write the models `names` (default: all) under `root`; returns the names written."""
    wanted = list(names) if names is not None else list(MODEL_NAMES)
    models = {m.name: m for m in example_models()}
    unknown = sorted(set(wanted) - set(models))
    if unknown:
        raise ValueError(f"no such example model: {', '.join(unknown)} (known: {', '.join(MODEL_NAMES)})")
    sources = resources.files("ensemble_examples") / "triton_models"
    for name in wanted:
        model = models[name]
        version = root / name / "1"
        version.mkdir(parents=True, exist_ok=True)
        (root / name / CONFIG_FILENAME).write_text(model.config, encoding="utf-8")
        (version / "model.py").write_text((sources / model.source / "model.py").read_text(encoding="utf-8"),
                                          encoding="utf-8")
        if name == "densenet_onnx":
            (root / name / LABELS_FILENAME).write_text("\n".join(labels()) + "\n", encoding="utf-8")
    return wanted


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ensemble_examples.triton_repository", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="directory to write the repository into")
    parser.add_argument("--models", nargs="*", default=None, choices=MODEL_NAMES, help="default: all")
    args = parser.parse_args(argv)
    for name in build_triton_examples(args.root, args.models):
        print(args.root / name)


if __name__ == "__main__":
    main()
