"""Model repositories for the ensemble integration tests: good ensembles next to one broken ensemble per rule.

Everything is written here (ONNX built with `onnx.helper`, Python models copied from `models/`); nothing is
downloaded. Configs are Triton's text format, as a user would write them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from ensemble_examples import onnx_models
from onnx import TensorProto, helper

MODELS = Path(__file__).parent / "models"

WIDTH = 4  # every batching tensor here is [-1, 4] (onnx_models.ROUTE_SIZE)


# ---- config text ------------------------------------------------------------------------------------
def tensor(name: str, data_type: str, dims: Sequence[int]) -> str:
    return f'{{ name: "{name}" data_type: {data_type} dims: [ {", ".join(str(d) for d in dims)} ] }}'


def io(inputs: Sequence[str], outputs: Sequence[str]) -> str:
    return f"input [ {', '.join(inputs)} ]\noutput [ {', '.join(outputs)} ]\n"


FP32_X = tensor("X", "TYPE_FP32", [WIDTH])
FP32_Y = tensor("Y", "TYPE_FP32", [WIDTH])
VERSION_OUT = tensor("version", "TYPE_INT32", [1])


def onnx_config(name: str, inputs: Sequence[str], outputs: Sequence[str], extra: str = "") -> str:
    return f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n{io(inputs, outputs)}{extra}'


@dataclass(frozen=True)
class StepSpec:
    model: str
    inputs: Mapping[str, str]  # step model input -> ensemble tensor
    outputs: Mapping[str, str]  # step model output -> ensemble tensor
    version: int = -1

    def text(self) -> str:
        maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in self.inputs.items()]
        maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in self.outputs.items()]
        return f'{{ model_name: "{self.model}" model_version: {self.version} {" ".join(maps)} }}'


@dataclass(frozen=True)
class EnsembleSpec:
    name: str
    inputs: Sequence[str]
    outputs: Sequence[str]
    steps: Sequence[StepSpec]
    max_batch_size: int = 8
    extra: str = field(default="")

    def text(self) -> str:
        steps = ",\n    ".join(step.text() for step in self.steps)
        return (
            f'name: "{self.name}"\nplatform: "ensemble"\nmax_batch_size: {self.max_batch_size}\n'
            f"{io(self.inputs, self.outputs)}ensemble_scheduling {{\n  step [\n    {steps}\n  ]\n}}\n{self.extra}"
        )


# ---- ONNX models ------------------------------------------------------------------------------------
def _onnx(
    nodes: list[onnx.NodeProto], name: str, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]
) -> bytes:
    graph = helper.make_graph(nodes, name, inputs, outputs)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", onnx_models.OPSET)], ir_version=onnx_models.IR_VERSION
    )
    onnx.checker.check_model(model)
    return model.SerializeToString()


def combine_model() -> bytes:
    """`A`, `B` FP32 [-1,4] -> `SUM` = A + B, `DIFF` = A - B."""
    shape: list[str | int] = ["batch", WIDTH]
    return _onnx(
        [helper.make_node("Add", ["A", "B"], ["SUM"]), helper.make_node("Sub", ["A", "B"], ["DIFF"])],
        "combine",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("A", "B")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("SUM", "DIFF")],
    )


def identity_model(elem_type: int, width: int) -> bytes:
    shape: list[str | int] = ["batch", width]
    return _onnx(
        [helper.make_node("Identity", ["X"], ["Y"])],
        "identity",
        [helper.make_tensor_value_info("X", elem_type, shape)],
        [helper.make_tensor_value_info("Y", elem_type, shape)],
    )


def affine_model(scale: float, offset: float) -> bytes:
    """`X` FP32 [-1,4] -> `Y` = X * scale + offset."""
    return onnx_models.affine(scale, offset).SerializeToString()


def versioned_model(version: int) -> bytes:
    """`X` FP32 [-1,4] -> `Y` = X + version, `version` INT32 [-1,1] = version."""
    return onnx_models.versioned(version).SerializeToString()


# ---- writing ----------------------------------------------------------------------------------------
def write_model(root: Path, name: str, config: str, versions: Mapping[int, Mapping[str, bytes | Path]]) -> None:
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.pbtxt").write_text(config)
    for version, files in versions.items():
        write_version(directory, version, files, atomic=False)


def write_version(model_dir: Path, version: int, files: Mapping[str, bytes | Path], *, atomic: bool = True) -> Path:
    """Write `<model_dir>/<version>/`; with `atomic`, into a hidden staging dir first, then one rename.

    A server scanning the repository meanwhile sees either no version directory or a complete one.
    """
    target = model_dir / str(version)
    staging = model_dir / f".staging-{version}" if atomic else target
    staging.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        path = staging / rel
        if isinstance(content, Path):
            shutil.copy(content, path)
        else:
            path.write_bytes(content)
    if atomic:
        os.rename(staging, target)
    return target


def remove_version(model_dir: Path, version: int) -> None:
    """Remove a version directory with one rename (out of the scan's sight), then delete it."""
    doomed = model_dir / f".removed-{version}"
    os.rename(model_dir / str(version), doomed)
    shutil.rmtree(doomed)


def _ensemble(root: Path, spec: EnsembleSpec) -> None:
    write_model(root, spec.name, spec.text(), {1: {}})


def _python(root: Path, name: str, source: str, config: str) -> None:
    write_model(
        root, name, f'name: "{name}"\nbackend: "python"\n{config}', {1: {"model.py": MODELS / source / "model.py"}}
    )


# ---- the shared repository --------------------------------------------------------------------------
SCALAR_X = tensor("X", "TYPE_FP32", [1])
SCALAR_Y = tensor("Y", "TYPE_FP32", [1])
BLS_CONFIG = 'max_batch_size: 0\n{io}parameters {{ key: "target" value: {{ string_value: "{target}" }} }}\n'

# broken ensemble -> what its UNAVAILABLE reason must contain (step and tensor named)
BROKEN: dict[str, tuple[str, ...]] = {
    "bad_cycle": ("steps form a cycle", "step 0 (model 'combine')", "step 1 (model 'times2')"),
    "bad_unproduced": (
        "step 0 (model 'times2') input 'X'",
        "'ghost'",
        "neither an ensemble input nor any step's output",
    ),
    "bad_output": ("nothing produces ensemble output 'nothing'",),
    "bad_two_producers": ("step 1 (model 'plus10') output 'Y'", "'OUT'", "step 0 (model 'times2') output 'Y'"),
    "bad_dtype": (
        "ensemble tensor 'mid'",
        "data type mismatch",
        "step 0 (model 'times2') output 'Y'",
        "step 1 (model 'int_ident') input 'X'",
        "TYPE_FP32",
        "TYPE_INT32",
    ),
    "bad_shape": (
        "ensemble tensor 'mid'",
        "shape mismatch",
        "step 0 (model 'times2') output 'Y'",
        "step 1 (model 'wide') input 'X'",
    ),
    "bad_missing_model": ("step 0 (model 'no_such_model')", "does not exist"),
    "bad_pinned": ("step 0 (model 'times2')", "model_version 7", "not available"),
}

IN = tensor("IN", "TYPE_FP32", [WIDTH])
OUT = tensor("OUT", "TYPE_FP32", [WIDTH])


def _broken(root: Path) -> None:
    def x_to(tensor_name: str) -> dict[str, str]:
        return {"X": tensor_name}

    def y_to(tensor_name: str) -> dict[str, str]:
        return {"Y": tensor_name}

    specs = [
        EnsembleSpec(
            "bad_cycle",
            [IN],
            [tensor("loop_a", "TYPE_FP32", [WIDTH])],
            [
                StepSpec("combine", {"A": "IN", "B": "loop_b"}, {"SUM": "loop_a"}),
                StepSpec("times2", x_to("loop_a"), y_to("loop_b")),
            ],
        ),
        EnsembleSpec(
            "bad_unproduced",
            [IN],
            [OUT, tensor("OUT2", "TYPE_FP32", [WIDTH])],
            [
                StepSpec("times2", x_to("ghost"), y_to("OUT")),
                StepSpec("plus10", x_to("IN"), y_to("OUT2")),
            ],
        ),
        EnsembleSpec(
            "bad_output",
            [IN],
            [OUT, tensor("nothing", "TYPE_FP32", [WIDTH])],
            [
                StepSpec("times2", x_to("IN"), y_to("OUT")),
            ],
        ),
        EnsembleSpec(
            "bad_two_producers",
            [IN],
            [OUT],
            [
                StepSpec("times2", x_to("IN"), y_to("OUT")),
                StepSpec("plus10", x_to("IN"), y_to("OUT")),
            ],
        ),
        EnsembleSpec(
            "bad_dtype",
            [IN],
            [tensor("OUT", "TYPE_INT32", [WIDTH])],
            [
                StepSpec("times2", x_to("IN"), y_to("mid")),
                StepSpec("int_ident", x_to("mid"), y_to("OUT")),
            ],
        ),
        EnsembleSpec(
            "bad_shape",
            [IN],
            [tensor("OUT", "TYPE_FP32", [8])],
            [
                StepSpec("times2", x_to("IN"), y_to("mid")),
                StepSpec("wide", x_to("mid"), y_to("OUT")),
            ],
        ),
        EnsembleSpec("bad_missing_model", [IN], [OUT], [StepSpec("no_such_model", x_to("IN"), y_to("OUT"))]),
        EnsembleSpec("bad_pinned", [IN], [OUT], [StepSpec("times2", x_to("IN"), y_to("OUT"), version=7)]),
    ]
    assert {s.name for s in specs} == set(BROKEN)
    for spec in specs:
        _ensemble(root, spec)


def build(root: Path) -> Path:
    """The repository the module-scoped server serves (good and broken ensembles side by side)."""
    root.mkdir(parents=True, exist_ok=True)
    y = tensor("y", "TYPE_FP32", [WIDTH])

    def affine(name: str, scale: float, offset: float, extra: str = "") -> None:
        write_model(
            root, name, onnx_config(name, [FP32_X], [FP32_Y], extra), {1: {"model.onnx": affine_model(scale, offset)}}
        )

    ab = [tensor("A", "TYPE_FP32", [WIDTH]), tensor("B", "TYPE_FP32", [WIDTH])]
    sum_diff = [tensor("SUM", "TYPE_FP32", [WIDTH]), tensor("DIFF", "TYPE_FP32", [WIDTH])]

    # 1. fan-out / fan-in: X -> (times2, plus10) -> combine
    affine("times2", 2.0, 0.0)
    affine("plus10", 1.0, 10.0)
    write_model(root, "combine", onnx_config("combine", ab, sum_diff), {1: {"model.onnx": combine_model()}})
    _ensemble(
        root,
        EnsembleSpec(
            "fan",
            [FP32_X],
            [tensor("sum", "TYPE_FP32", [WIDTH]), tensor("diff", "TYPE_FP32", [WIDTH])],
            [
                StepSpec("times2", {"X": "X"}, {"Y": "doubled"}),
                StepSpec("plus10", {"X": "X"}, {"Y": "shifted"}),
                StepSpec("combine", {"A": "doubled", "B": "shifted"}, {"SUM": "sum", "DIFF": "diff"}),
            ],
        ),
    )

    # 2. output subsets, each step on its own model so its statistics tell whether it ran
    affine("sub_a", 2.0, 0.0)
    affine("sub_b", 1.0, 10.0)
    write_model(root, "sub_c", onnx_config("sub_c", ab, sum_diff), {1: {"model.onnx": combine_model()}})
    _ensemble(
        root,
        EnsembleSpec(
            "subsets",
            [FP32_X],
            [tensor(n, "TYPE_FP32", [WIDTH]) for n in ("a_out", "b_out", "total")],
            [
                StepSpec("sub_a", {"X": "X"}, {"Y": "a_out"}),
                StepSpec("sub_b", {"X": "X"}, {"Y": "b_out"}),
                StepSpec("sub_c", {"A": "a_out", "B": "b_out"}, {"SUM": "total"}),
            ],
        ),
    )

    # 3. broken ensembles and the step models they misuse
    write_model(
        root,
        "int_ident",
        onnx_config("int_ident", [tensor("X", "TYPE_INT32", [WIDTH])], [tensor("Y", "TYPE_INT32", [WIDTH])]),
        {1: {"model.onnx": identity_model(TensorProto.INT32, WIDTH)}},
    )
    write_model(
        root,
        "wide",
        onnx_config("wide", [tensor("X", "TYPE_FP32", [8])], [tensor("Y", "TYPE_FP32", [8])]),
        {1: {"model.onnx": identity_model(TensorProto.FLOAT, 8)}},
    )
    _broken(root)

    # 4. a failing step
    _python(
        root,
        "py_check",
        "py_check",
        f"max_batch_size: 0\n{io([SCALAR_X], [SCALAR_Y])}instance_group [ {{ count: 2 kind: KIND_CPU }} ]\n",
    )
    _ensemble(
        root,
        EnsembleSpec(
            "fail_chain", [SCALAR_X], [SCALAR_Y], [StepSpec("py_check", {"X": "X"}, {"Y": "Y"})], max_batch_size=0
        ),
    )

    # 5. pinned versions vs latest: vmodel has versions 1, 2, 3, all served
    write_model(
        root,
        "vmodel",
        onnx_config("vmodel", [FP32_X], [FP32_Y, VERSION_OUT], "version_policy: { all: {} }\n"),
        {v: {"model.onnx": versioned_model(v)} for v in (1, 2, 3)},
    )
    version_out = tensor("version", "TYPE_INT32", [1])
    for name, pinned in (("pinned_v2", 2), ("latest_v", -1)):
        _ensemble(
            root,
            EnsembleSpec(
                name,
                [FP32_X],
                [y, version_out],
                [
                    StepSpec("vmodel", {"X": "X"}, {"Y": "y", "version": "version"}, version=pinned),
                ],
            ),
        )
    _ensemble(
        root,
        EnsembleSpec(
            "mixed_v",
            [FP32_X],
            [tensor("v_one", "TYPE_INT32", [1]), tensor("v_latest", "TYPE_INT32", [1])],
            [
                StepSpec("vmodel", {"X": "X"}, {"version": "v_one"}, version=1),
                StepSpec("vmodel", {"X": "X"}, {"version": "v_latest"}),
            ],
        ),
    )

    # 6. dynamic batching of a composing model across concurrent ensemble requests
    affine("batched", 3.0, 0.0, "dynamic_batching { max_queue_delay_microseconds: 100000 }\n")
    _ensemble(root, EnsembleSpec("batch_ens", [FP32_X], [y], [StepSpec("batched", {"X": "X"}, {"Y": "y"})]))

    # 7. BLS: sync exec() into a python model, async_exec() into an ensemble
    _python(root, "bls_sync", "bls_sync", BLS_CONFIG.format(io=io([SCALAR_X], [SCALAR_Y]), target="py_check"))
    _python(root, "bls_async", "bls_async", BLS_CONFIG.format(io=io([SCALAR_X], [SCALAR_Y]), target="fail_chain"))

    # 9. composite readiness
    affine("ready_step", 1.0, 1.0)
    _ensemble(root, EnsembleSpec("ready_ens", [FP32_X], [y], [StepSpec("ready_step", {"X": "X"}, {"Y": "y"})]))
    return root


# ready once the server has started (pinned_v2 and mixed_v: see test_versions.py)
GOOD_ENSEMBLES = ("fan", "subsets", "fail_chain", "latest_v", "batch_ens", "ready_ens")


# ---- the version-consistency repository -------------------------------------------------------------
ROLLOVER_STEPS = ("step_a", "step_b")
ROLLOVER_ENSEMBLE = "vc_ens"


def step_config(name: str) -> str:
    return onnx_config(
        name, [FP32_X], [FP32_Y, VERSION_OUT], "dynamic_batching { max_queue_delay_microseconds: 2000 }\n"
    )


def build_rollover(root: Path) -> Path:
    """`vc_ens`: X -> step_a -> step_b, both `versioned` models at version 1 (default policy: latest 1).

    Outputs `y` (= X + a's version + b's version), `step_a_version`, `step_b_version`.
    """
    root.mkdir(parents=True, exist_ok=True)
    for name in ROLLOVER_STEPS:
        write_model(root, name, step_config(name), {1: {"model.onnx": versioned_model(1)}})
    _ensemble(
        root,
        EnsembleSpec(
            ROLLOVER_ENSEMBLE,
            [FP32_X],
            [
                tensor("y", "TYPE_FP32", [WIDTH]),
                tensor("step_a_version", "TYPE_INT32", [1]),
                tensor("step_b_version", "TYPE_INT32", [1]),
            ],
            [
                StepSpec("step_a", {"X": "X"}, {"Y": "a_y", "version": "step_a_version"}),
                StepSpec("step_b", {"X": "a_y"}, {"Y": "y", "version": "step_b_version"}),
            ],
        ),
    )
    return root
