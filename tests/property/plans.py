"""Inference requests as plans: a valid request for a served model, then mutations that each make it invalid.

A plan is transport-neutral; `grpc_wire` and `http_wire` turn it into bytes. The oracle is the plan itself:
with no invalidating mutation the server must answer with exactly the expected outputs, with one it must
refuse (see `invariant`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from hypothesis import strategies as st

Arrays = dict[str, np.ndarray[Any, Any]]


@dataclass(frozen=True)
class ModelSpec:
    """What the property repository's model accepts (tests/integration/runtime/repo.py) and what it computes."""

    max_batch: int
    inputs: Mapping[str, tuple[str, tuple[int, ...]]]
    compute: Callable[[Arrays], Arrays]
    unchecked_outputs: tuple[str, ...] = ()  # produced, but not from the inputs (e.g. an info string)


def _add_sub(x: Arrays) -> Arrays:
    return {"OUTPUT0": x["INPUT0"] + x["INPUT1"], "OUTPUT1": x["INPUT0"] - x["INPUT1"]}


def _identity(x: Arrays) -> Arrays:
    return {name.replace("_in", "_out"): array for name, array in x.items()}


MODELS: Mapping[str, ModelSpec] = {
    "add_sub": ModelSpec(8, {"INPUT0": ("FP32", (16,)), "INPUT1": ("FP32", (16,))}, _add_sub),
    "py_add_sub": ModelSpec(0, {"INPUT0": ("FP32", (4,)), "INPUT1": ("FP32", (4,))}, _add_sub, ("INFO",)),
    "types": ModelSpec(
        4,
        {"fp16_in": ("FP16", (2,)), "int8_in": ("INT8", (2,)), "flag_in": ("BOOL", (2,)), "text_in": ("BYTES", (2,))},
        _identity,
    ),
}
UNAVAILABLE_MODELS = frozenset({"init_fails"})  # in the repository, failed to load: UNAVAILABLE / 503 is right
WIRE_TYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
              "FP16", "FP32", "FP64", "BYTES", "BF16")
CHARS = st.characters(exclude_categories=["Cs"])  # protobuf strings are UTF-8: no lone surrogates


@dataclass(frozen=True)
class InputPlan:
    name: str
    datatype: str  # as declared on the wire
    shape: tuple[int, ...]  # as declared on the wire
    array: np.ndarray[Any, Any]  # the values actually sent
    as_json: bool = False  # HTTP: JSON `data` rather than binary; gRPC: typed `contents` rather than raw
    drop_bytes: int = 0  # raw/binary payload: this many bytes cut from the end
    extra_bytes: bytes = b""  # raw/binary payload: appended
    bad_prefix: bool = False  # BYTES raw payload: the first length prefix claims more than there is
    json_count_delta: int = 0  # JSON `data` / typed contents: elements removed (<0) or added (>0)


@dataclass(frozen=True)
class Plan:
    model: str
    version: str
    inputs: tuple[InputPlan, ...]
    outputs: tuple[str, ...] = ()  # requested outputs (empty: all)
    binary_outputs: bool = False  # HTTP: ask for binary output data
    request_id: str = ""
    parameters: Mapping[str, bool | int | float | str] = field(default_factory=dict)
    mutations: tuple[str, ...] = ()  # every one of these makes the request invalid

    @property
    def valid(self) -> bool:
        return not self.mutations

    def expected(self) -> Arrays:
        """Outputs the model must answer a valid plan with (only those the test can compute)."""
        spec = MODELS[self.model]
        values = spec.compute({i.name: i.array for i in self.inputs})
        return {k: v for k, v in values.items() if not self.outputs or k in self.outputs}

    def output_names(self) -> set[str]:
        spec = MODELS[self.model]
        every = set(spec.compute({i.name: i.array for i in self.inputs})) | set(spec.unchecked_outputs)
        return set(self.outputs) if self.outputs else every


def _values(datatype: str, shape: tuple[int, ...], seed: int) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape))
    if datatype == "BYTES":
        # UTF-8 only: the ONNX model's STRING input fails on other bytes (test_findings.py)
        flat = np.empty(count, dtype=np.object_)
        flat[:] = ["".join(chr(c) for c in rng.integers(32, 0x2FF, int(n))).encode() for n in rng.integers(0, 6, count)]
        return flat.reshape(shape)
    if datatype == "BOOL":
        return rng.integers(0, 2, shape).astype(np.bool_)
    if datatype == "INT8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    if datatype == "FP16":
        return (rng.integers(-2048, 2048, shape) / 4).astype(np.float16)  # exact in fp16 and in JSON
    return rng.standard_normal(shape).astype(np.float32)


@st.composite
def valid_plans(draw: st.DrawFn, json_ok: bool = True) -> Plan:
    """A valid request for one of MODELS; `json_ok`: inputs may be JSON/typed (per-input over HTTP)."""
    model = draw(st.sampled_from(sorted(MODELS)))
    spec = MODELS[model]
    batch = (draw(st.integers(1, spec.max_batch)),) if spec.max_batch else ()
    seed = draw(st.integers(0, 2**32 - 1))
    inputs = []
    for index, (name, (datatype, dims)) in enumerate(spec.inputs.items()):
        as_json = json_ok and draw(st.booleans())
        shape = batch + dims
        inputs.append(InputPlan(name, datatype, shape, _values(datatype, shape, seed + index), as_json))
    order = draw(st.permutations(inputs))
    outputs: tuple[str, ...] = ()
    if draw(st.booleans()):
        names = sorted(spec.compute({i.name: i.array for i in inputs}))
        outputs = tuple(draw(st.lists(st.sampled_from(names), min_size=1, unique=True)))
    params = draw(st.dictionaries(st.from_regex(r"x_[a-z]{1,8}", fullmatch=True),
                                  st.one_of(st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(CHARS, max_size=20)),
                                  max_size=3))
    return Plan(model, draw(st.sampled_from(["", "1"])), tuple(order), outputs,
                binary_outputs=draw(st.booleans()), request_id=draw(st.text(CHARS, max_size=20)), parameters=params)


# ---- invalidating mutations -----------------------------------------------------------------------------
# Each takes (draw, plan, index of the input to touch) and returns the mutated plan with its label added.
# Shapes stay numpy-representable (<= 8 dims, a zero dim only with small others) and BYTES counts small:
# the defect classes outside that domain have their own properties (test_*_known_defects, test_*_findings).

def _with(plan: Plan, label: str, **changes: Any) -> Plan:
    return replace(plan, mutations=(*plan.mutations, label), **changes)


def _set_input(plan: Plan, index: int, label: str, **changes: Any) -> Plan:
    inputs = list(plan.inputs)
    inputs[index] = replace(inputs[index], **changes)
    return _with(plan, label, inputs=tuple(inputs))


BYTES_COUNT_LIMIT = 2**16  # declared BYTES element counts stay below this outside the finding-4 tests
BIG_DIMS = st.integers(2**31, 2**40)
SMALL_DIMS = st.integers(0, 64)


@st.composite
def mutated_plans(draw: st.DrawFn, json_ok: bool = True) -> Plan:
    """A valid plan with 0-3 invalidating mutations, each on an input no other one touched (none can undo another)."""
    plan = draw(valid_plans(json_ok))
    fresh = list(range(len(plan.inputs)))
    for step in range(draw(st.integers(0, 3))):
        kinds = [k for k in MUTATIONS if fresh or k in ("unknown_model", "missing_version", "unknown_output")]
        kind = draw(st.sampled_from([k for k in kinds if k != "drop_input" or step == 0]))
        index = fresh.pop(draw(st.integers(0, len(fresh) - 1))) if fresh else 0
        plan = _mutate(draw, plan, index, kind)
        if kind == "drop_input":
            fresh = [f - 1 if f > index else f for f in fresh]
    return plan


MUTATIONS = ("unknown_model", "missing_version", "dtype_lie", "shape_lie", "huge_dims", "short_payload",
             "long_payload", "bad_prefix", "duplicate_input", "drop_input", "unknown_input", "unknown_output")


def _mutate(draw: st.DrawFn, plan: Plan, index: int, kind: str) -> Plan:
    target = plan.inputs[index] if plan.inputs else None
    if kind == "unknown_model":
        name = draw(st.text(CHARS, min_size=1, max_size=200).filter(lambda n: n not in MODELS and n not in UNAVAILABLE_MODELS
                                                             and n.strip() and "\x00" not in n))
        return _with(plan, kind, model=name)
    if kind == "missing_version":
        return _with(plan, kind, version=draw(st.sampled_from(["2", "7", "0", "x", "1.0", "99999999999999999999"])))
    assert target is not None
    if kind == "dtype_lie":
        wire = draw((st.sampled_from(WIRE_TYPES) | st.text(CHARS, max_size=12)).filter(lambda w: w != target.datatype))
        return _set_input(plan, index, kind, datatype=wire)
    if kind == "shape_lie":
        shapes = st.lists(SMALL_DIMS, max_size=8).filter(lambda s: tuple(s) != target.shape)
        if target.datatype == "BYTES":  # a big BYTES count is finding 4: allocated (GiBs) before any check
            shapes = shapes.filter(lambda s: math.prod(s) <= BYTES_COUNT_LIMIT)
        return _set_input(plan, index, kind, shape=tuple(draw(shapes)))
    if kind == "huge_dims" and target.datatype != "BYTES":
        # non-zero element counts far beyond the payload (a BYTES count is finding 4: its own property)
        shape = tuple(draw(st.lists(st.one_of(BIG_DIMS, st.integers(1, 8)), min_size=1, max_size=4)
                           .filter(lambda s: max(s) >= 2**31)))
        return _set_input(plan, index, kind, shape=shape)
    if kind == "short_payload":
        if target.as_json:
            return _set_input(plan, index, kind, json_count_delta=-draw(st.integers(1, 4)))
        return _set_input(plan, index, kind, drop_bytes=draw(st.integers(1, 8)))
    if kind == "long_payload":
        if target.as_json:
            return _set_input(plan, index, kind, json_count_delta=draw(st.integers(1, 4)))
        return _set_input(plan, index, kind, extra_bytes=draw(st.binary(min_size=1, max_size=9)))
    if kind == "bad_prefix" and target.datatype == "BYTES" and not target.as_json:
        return _set_input(plan, index, kind, bad_prefix=True)
    if kind == "duplicate_input":
        return _with(plan, kind, inputs=(*plan.inputs, target))
    if kind == "drop_input":
        return _with(plan, kind, inputs=tuple(i for n, i in enumerate(plan.inputs) if n != index))
    if kind == "unknown_input":
        taken = {i.name for i in plan.inputs} | set(MODELS[plan.model].inputs if plan.model in MODELS else ())
        name = draw(st.text(CHARS, min_size=1, max_size=30).filter(lambda n: n not in taken))
        return _with(plan, kind, inputs=(*plan.inputs, replace(target, name=name)))
    if kind == "unknown_output":
        return _with(plan, kind, outputs=(*plan.outputs, draw(st.sampled_from(["NOPE", "", "OUTPUT9", "\u00e9"]))))
    return plan  # the kind does not apply to this input: no mutation
