"""`ensemble-build-plan`: ONNX -> TensorRT plan (`model.plan`) with this image's TensorRT, no TensorRT container.

    ensemble-build-plan model.onnx --min-shapes x:1x3x224x224 --opt-shapes x:8x3x224x224 \\
        --max-shapes x:64x3x224x224 --fp16 --workspace-mib 2048 -o repo/resnet/1/model.plan

A plan only runs on the TensorRT version and GPU model that built it: build it on the serving image and GPU.
Argument and shape handling is pure (`parse_args`, `parse_shapes`, `check_profile`, `check_against_graph`);
`build` needs TensorRT and a GPU.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from ensemble_runtime.config.model_config import ConfigError
from ensemble_runtime.config.onnx_autocomplete import read_graph_io

Shape = tuple[int, ...]
Shapes = dict[str, Shape]
GraphTensor = tuple[str, int, list[int]]  # as config.onnx_autocomplete.read_graph_io gives them


class PlanError(ValueError):
    """A request that cannot produce a plan; the message says what to change."""


@dataclass(frozen=True, slots=True)
class PlanOptions:
    onnx: Path
    output: Path
    min_shapes: Shapes = field(default_factory=dict)
    opt_shapes: Shapes = field(default_factory=dict)
    max_shapes: Shapes = field(default_factory=dict)
    fp16: bool = False
    int8: bool = False
    workspace_mib: int | None = None
    profiles: int = 1


def parse_shape(text: str) -> Shape:
    parts = text.lower().split("x")
    if not parts or not all(p.isdigit() for p in parts):
        raise PlanError(f"shape '{text}' is not dimensions joined by 'x' (e.g. 1x3x224x224)")
    dims = tuple(int(p) for p in parts)
    if any(d == 0 for d in dims):
        raise PlanError(f"shape '{text}' has a zero dimension")
    return dims


def parse_shapes(text: str) -> Shapes:
    """'input:1x3x224x224,mask:1x128' -> {'input': (1, 3, 224, 224), 'mask': (1, 128)}; names may contain ':'."""
    shapes: Shapes = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        name, sep, dims = item.rpartition(":")
        if not sep or not name:
            raise PlanError(f"'{item}' is not name:shape (e.g. input:1x3x224x224)")
        if name in shapes:
            raise PlanError(f"input '{name}' is given twice")
        shapes[name] = parse_shape(dims)
    return shapes


def check_profile(min_shapes: Shapes, opt_shapes: Shapes, max_shapes: Shapes) -> None:
    """Same inputs in all three, same rank, and min <= opt <= max in every dimension."""
    names = set(min_shapes) | set(opt_shapes) | set(max_shapes)
    for name in sorted(names):
        given = {"min": min_shapes.get(name), "opt": opt_shapes.get(name), "max": max_shapes.get(name)}
        absent = [k for k, v in given.items() if v is None]
        if absent:
            raise PlanError(f"input '{name}' has no --{'/--'.join(absent)}-shapes (give min, opt and max)")
        low, opt, high = min_shapes[name], opt_shapes[name], max_shapes[name]
        if not len(low) == len(opt) == len(high):
            raise PlanError(f"input '{name}': min {_text(low)}, opt {_text(opt)} and max {_text(high)} differ in rank")
        if any(not a <= b <= c for a, b, c in zip(low, opt, high, strict=True)):
            raise PlanError(f"input '{name}': need min <= opt <= max in every dimension, got "
                            f"min {_text(low)}, opt {_text(opt)}, max {_text(high)}")


def check_against_graph(options: PlanOptions, inputs: Sequence[GraphTensor]) -> None:
    """Every dynamic ONNX input has a profile; given shapes name real inputs and keep their fixed dimensions."""
    by_name = {name: dims for name, _, dims in inputs}
    unknown = sorted(set(options.min_shapes) - set(by_name))
    if unknown:
        raise PlanError(f"{', '.join(unknown)} is not an input of {options.onnx.name} "
                        f"(inputs: {', '.join(sorted(by_name))})")
    for name, dims in by_name.items():
        shape = options.min_shapes.get(name)
        if shape is None:
            if any(d == -1 for d in dims):
                raise PlanError(f"input '{name}' has dynamic shape {_text(tuple(dims))}: give it --min-shapes, "
                                "--opt-shapes and --max-shapes")
            continue
        for label, shapes in (("min", options.min_shapes), ("opt", options.opt_shapes), ("max", options.max_shapes)):
            given = shapes[name]
            if len(given) != len(dims) or any(d != -1 and d != g for d, g in zip(dims, given, strict=True)):
                raise PlanError(f"input '{name}': {label} shape {_text(given)} does not fit the ONNX shape "
                                f"{_text(tuple(dims))}")


def _text(shape: Sequence[int]) -> str:
    return "x".join("?" if d == -1 else str(d) for d in shape)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ensemble-build-plan", description="Build a TensorRT plan from an ONNX model.")
    p.add_argument("onnx", type=Path, help="the ONNX model")
    p.add_argument("-o", "--output", type=Path, help="plan to write (default: model.plan next to the ONNX file)")
    p.add_argument("--min-shapes", default="", help="name:1x3x224x224,... smallest shapes of the dynamic inputs")
    p.add_argument("--opt-shapes", default="", help="shapes TensorRT tunes for")
    p.add_argument("--max-shapes", default="", help="largest shapes (the batch here bounds max_batch_size)")
    p.add_argument("--shapes", default="", help="min = opt = max (a static profile); the flags above override")
    p.add_argument("--fp16", action="store_true", help="allow FP16 kernels")
    p.add_argument("--int8", action="store_true",
                   help="allow INT8 kernels; only for an ONNX that is already quantized (QuantizeLinear/"
                        "DequantizeLinear nodes): there is no calibration step")
    p.add_argument("--workspace-mib", type=int, help="builder workspace limit in MiB (default: TensorRT's)")
    p.add_argument("--profiles", type=int, default=1,
                   help="copies of the profile, so up to this many instances each get their own (default 1)")
    return p


def parse_args(argv: Sequence[str]) -> PlanOptions:
    """Parse and check the command line; PlanError says what is wrong (argparse itself exits on bad usage)."""
    args = parser().parse_args(list(argv))
    common = parse_shapes(args.shapes)
    shapes = [{**common, **parse_shapes(text)} for text in (args.min_shapes, args.opt_shapes, args.max_shapes)]
    check_profile(*shapes)
    if args.workspace_mib is not None and args.workspace_mib <= 0:
        raise PlanError(f"--workspace-mib must be positive, got {args.workspace_mib}")
    if args.profiles < 1:
        raise PlanError(f"--profiles must be at least 1, got {args.profiles}")
    output = args.output if args.output is not None else args.onnx.parent / "model.plan"
    return PlanOptions(args.onnx, output, shapes[0], shapes[1], shapes[2], args.fp16, args.int8,
                       args.workspace_mib, args.profiles)


def is_quantized(model: Any) -> bool:
    """Whether an onnx.ModelProto carries explicit quantization (Q/DQ nodes), which --int8 needs."""
    quant_ops = {"QuantizeLinear", "DequantizeLinear"}
    return any(node.op_type in quant_ops for node in model.graph.node)


def check_onnx(options: PlanOptions) -> None:
    """Checks that need only the onnx package: the file, the shapes against its inputs, --int8 on Q/DQ only."""
    if not options.onnx.is_file():
        raise PlanError(f"{options.onnx}: no such file")
    try:
        inputs, _ = read_graph_io(options.onnx)
    except ConfigError as exc:
        raise PlanError(str(exc)) from None
    check_against_graph(options, inputs)
    if options.int8 and not is_quantized(onnx.load(str(options.onnx), load_external_data=False)):
        raise PlanError(f"--int8 without calibration needs a quantized ONNX, and {options.onnx.name} has no "
                        "QuantizeLinear/DequantizeLinear nodes; quantize it first (e.g. onnxruntime.quantization."
                        "quantize_static with QuantFormat.QDQ) or build with --fp16")


def build(options: PlanOptions, trt: Any) -> bytes:
    """Parse the ONNX with TensorRT's parser and build a serialized engine (needs a GPU)."""
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # TensorRT 10: explicit batch is the only mode
    onnx_parser = trt.OnnxParser(network, logger)
    if not onnx_parser.parse_from_file(str(options.onnx)):
        errors = [str(onnx_parser.get_error(i)) for i in range(onnx_parser.num_errors)]
        raise PlanError(f"TensorRT cannot parse {options.onnx.name}: " + "; ".join(errors))
    config = builder.create_builder_config()
    if options.workspace_mib:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, options.workspace_mib << 20)
    if options.fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    if options.int8:
        config.set_flag(trt.BuilderFlag.INT8)
    if options.min_shapes:
        for _ in range(options.profiles):
            profile = builder.create_optimization_profile()
            for name in options.min_shapes:
                profile.set_shape(name, options.min_shapes[name], options.opt_shapes[name], options.max_shapes[name])
            config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise PlanError("TensorRT could not build the engine (see the TensorRT messages above)")
    return bytes(serialized)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        options = parse_args(sys.argv[1:] if argv is None else argv)
        check_onnx(options)
    except PlanError as exc:
        print(f"ensemble-build-plan: {exc}", file=sys.stderr)
        return 2
    try:
        trt = importlib.import_module("tensorrt")
    except ImportError:
        print("ensemble-build-plan: the tensorrt package is not installed; install the tensorrt extra "
              "(pip install 'ensemble-operator[gpu,tensorrt]', which needs pypi.nvidia.com) on a machine with an "
              "NVIDIA GPU", file=sys.stderr)
        return 3
    try:
        plan = build(options, trt)
    except PlanError as exc:
        print(f"ensemble-build-plan: {exc}", file=sys.stderr)
        return 1
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_bytes(plan)
    print(f"wrote {options.output} ({len(plan) / 2**20:.1f} MiB, TensorRT {getattr(trt, '__version__', '?')}"
          f"{', fp16' if options.fp16 else ''}{', int8' if options.int8 else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
