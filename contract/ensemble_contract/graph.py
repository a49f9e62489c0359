"""The ensemble graph rules, written once: the runtime applies them when it loads an ensemble, the operator's
webhook when it admits an Ensemble, so what `kubectl apply` accepts is what the runtime loads. Pure.

Each side describes its ensemble in the neutral terms below (the runtime from Triton ModelConfigs, the operator
from its custom resources) and gets back every problem, each naming the step and tensor it is about. The rules
follow Triton's ensemble validation (core `ensemble_utils.cc`):
- a step maps at least one input and one output; map keys are the model's own inputs/outputs; every model
  input is mapped unless `optional`;
- an ensemble tensor has exactly one producer (an ensemble input or one step output); every consumed tensor is
  produced; every ensemble output is written by a step; ensemble inputs and step outputs are all used;
- a step model that batches allows at least the ensemble's max_batch_size; a non-batching model may sit in a
  batching ensemble when its full shape (with the leading batch -1) agrees;
- data types agree; shapes agree with -1 as a wildcard, compared without the batch dimension or, failing that,
  with it (full shapes); ensemble inputs/outputs compare their `reshape` shape where present;
- the steps form no cycle.
What one side cannot know is left out: a step model the caller does not describe (`models` lacks it) or whose
tensors it does not declare (None) is not checked on those points, and its batching is assumed to be the
ensemble's when unknown. Which models exist and which versions they have is for each side to check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

UNKNOWN_MODEL_INPUT = "unknown-model-input"
UNKNOWN_MODEL_OUTPUT = "unknown-model-output"
UNMAPPED_MODEL_INPUT = "unmapped-model-input"
EMPTY_MAP = "empty-map"
DUPLICATE_PRODUCER = "duplicate-producer"
UNPRODUCED_TENSOR = "unproduced-tensor"
UNPRODUCED_OUTPUT = "unproduced-output"
UNUSED_TENSOR = "unused-tensor"
DTYPE_MISMATCH = "dtype-mismatch"
SHAPE_MISMATCH = "shape-mismatch"
BATCH_SIZE = "batch-size"
CYCLE = "cycle"


@dataclass(frozen=True, slots=True)
class Tensor:
    """A declared tensor: Triton data type name (`TYPE_FP32`) and dims without the batch dimension."""

    name: str
    data_type: str
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None = None  # ensemble inputs/outputs: the shape the steps see
    optional: bool = False


@dataclass(frozen=True, slots=True)
class StepModel:
    """What the graph needs of a step's model; None where the caller does not know."""

    inputs: tuple[Tensor, ...] | None
    outputs: tuple[Tensor, ...] | None
    max_batch_size: int | None


@dataclass(frozen=True, slots=True)
class GraphStep:
    label: str  # how messages name the step: "step 'pre'" or "step 0 (model 'pre')"
    model: str
    input_map: Mapping[str, str]  # model input -> ensemble tensor
    output_map: Mapping[str, str]  # model output -> ensemble tensor


@dataclass(frozen=True, slots=True)
class Graph:
    max_batch_size: int
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    steps: tuple[GraphStep, ...]


@dataclass(frozen=True, slots=True)
class Problem:
    code: str
    message: str
    step: int | None = None  # index into Graph.steps
    tensor: str | None = None


@dataclass(frozen=True, slots=True)
class _End:
    """One end of a tensor edge: who, and (when known) its type and shape."""

    origin: str
    step: int | None
    data_type: str | None = None
    dims: tuple[int, ...] | None = None
    batching: bool = False

    @property
    def full_dims(self) -> tuple[int, ...] | None:
        if self.dims is None:
            return None
        return (-1, *self.dims) if self.batching else self.dims

    def describe(self) -> str:
        return f"{self.data_type} {dims_text(self.full_dims or ())}"


def dims_match(a: Sequence[int], b: Sequence[int]) -> bool:
    """Same rank, and each dimension equal or -1 (a wildcard) on either side."""
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b, strict=True))


def dims_text(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _end(origin: str, step: int | None, tensor: Tensor | None, batching: bool, *, reshape: bool = False) -> _End:
    if tensor is None:
        return _End(origin, step)
    dims = tensor.reshape if reshape and tensor.reshape is not None else tensor.dims
    return _End(origin, step, tensor.data_type, tuple(dims), batching)


def _consistent(tensor: str, producer: _End, consumer: _End) -> list[Problem]:
    step = consumer.step if consumer.step is not None else producer.step
    if producer.data_type is None or consumer.data_type is None:
        return []
    if producer.data_type != consumer.data_type:
        return [
            Problem(
                DTYPE_MISMATCH,
                f"ensemble tensor '{tensor}': data type mismatch: {producer.origin} produces "
                f"{producer.data_type} but {consumer.origin} expects {consumer.data_type}",
                step,
                tensor,
            )
        ]
    assert producer.dims is not None and consumer.dims is not None  # known with the data type
    if dims_match(producer.dims, consumer.dims) or dims_match(producer.full_dims or (), consumer.full_dims or ()):
        return []
    return [
        Problem(
            SHAPE_MISMATCH,
            f"ensemble tensor '{tensor}': shape mismatch: {producer.origin} produces {producer.describe()} but "
            f"{consumer.origin} expects {consumer.describe()} (shapes include the batch dimension as -1 where "
            "the model batches)",
            step,
            tensor,
        )
    ]


def _step_batching(model: StepModel | None, ensemble_batching: bool) -> bool:
    if model is None or model.max_batch_size is None:
        return ensemble_batching
    return model.max_batch_size > 0


def _check_maps(index: int, step: GraphStep, model: StepModel | None, max_batch_size: int) -> list[Problem]:
    problems: list[Problem] = []
    name = step.model
    mbs = model.max_batch_size if model is not None else None
    if mbs is not None and 0 < mbs < max_batch_size:
        problems.append(
            Problem(
                BATCH_SIZE,
                f"{step.label}: ensemble allows max_batch_size {max_batch_size} but model '{name}' only "
                f"allows {mbs}",
                index,
            )
        )
    for kind, mapping in (("input_map", step.input_map), ("output_map", step.output_map)):
        if not mapping:
            problems.append(Problem(EMPTY_MAP, f"{step.label} has no {kind}", index))
    inputs = model.inputs if model is not None else None
    outputs = model.outputs if model is not None else None
    if inputs is not None:
        names = {t.name for t in inputs}
        for input_name, tensor in sorted(step.input_map.items()):
            if input_name not in names:
                problems.append(
                    Problem(
                        UNKNOWN_MODEL_INPUT,
                        f"{step.label} input_map maps ensemble tensor '{tensor}' to '{input_name}', which is "
                        f"not an input of model '{name}' (inputs: {', '.join(sorted(names))})",
                        index,
                        tensor,
                    )
                )
    if outputs is not None:
        names = {t.name for t in outputs}
        for output_name, tensor in sorted(step.output_map.items()):
            if output_name not in names:
                problems.append(
                    Problem(
                        UNKNOWN_MODEL_OUTPUT,
                        f"{step.label} output_map maps '{output_name}' to ensemble tensor '{tensor}', but "
                        f"'{output_name}' is not an output of model '{name}' (outputs: {', '.join(sorted(names))})",
                        index,
                        tensor,
                    )
                )
    for declared in inputs or ():
        if declared.name not in step.input_map and not declared.optional:
            problems.append(
                Problem(
                    UNMAPPED_MODEL_INPUT,
                    f"{step.label} input '{declared.name}' is not mapped to any ensemble tensor",
                    index,
                    declared.name,
                )
            )
    return problems


def check_graph(graph: Graph, models: Mapping[str, StepModel]) -> list[Problem]:
    """Every problem of the graph, in a stable order: per step (batch size, maps), producers, consumers,
    ensemble outputs, unused tensors, cycle."""
    batching = graph.max_batch_size > 0
    problems: list[Problem] = []
    for index, step in enumerate(graph.steps):
        problems += _check_maps(index, step, models.get(step.model), graph.max_batch_size)

    produced: dict[str, _End] = {
        t.name: _end(f"ensemble input '{t.name}'", None, t, batching, reshape=True) for t in graph.inputs
    }
    producer_step: dict[str, int] = {}
    for index, step in enumerate(graph.steps):
        model = models.get(step.model)
        declared = {t.name: t for t in (model.outputs or ())} if model is not None else {}
        step_batching = _step_batching(model, batching)
        for output_name, tensor in sorted(step.output_map.items()):
            origin = f"{step.label} output '{output_name}'"
            if tensor in produced:
                problems.append(
                    Problem(
                        DUPLICATE_PRODUCER,
                        f"{origin} writes ensemble tensor '{tensor}', which {produced[tensor].origin} already "
                        "provides (a tensor has exactly one producer)",
                        index,
                        tensor,
                    )
                )
                continue
            produced[tensor] = _end(origin, index, declared.get(output_name), step_batching)
            producer_step[tensor] = index

    consumed: set[str] = set()
    upstream: list[set[int]] = [set() for _ in graph.steps]
    for index, step in enumerate(graph.steps):
        model = models.get(step.model)
        declared = {t.name: t for t in (model.inputs or ())} if model is not None else {}
        step_batching = _step_batching(model, batching)
        for input_name, tensor in sorted(step.input_map.items()):
            consumer = _end(f"{step.label} input '{input_name}'", index, declared.get(input_name), step_batching)
            consumed.add(tensor)
            if tensor not in produced:
                problems.append(
                    Problem(
                        UNPRODUCED_TENSOR,
                        f"{consumer.origin} reads ensemble tensor '{tensor}', which is neither an ensemble "
                        "input nor any step's output",
                        index,
                        tensor,
                    )
                )
                continue
            if tensor in producer_step:
                upstream[index].add(producer_step[tensor])
            problems += _consistent(tensor, produced[tensor], consumer)

    for out in graph.outputs:
        if out.name not in producer_step:
            source = "is an ensemble input, not a step output" if out.name in produced else "no step writes it"
            problems.append(
                Problem(UNPRODUCED_OUTPUT, f"nothing produces ensemble output '{out.name}' ({source})", None, out.name)
            )
            continue
        end = _end(f"ensemble output '{out.name}'", None, out, batching, reshape=True)
        problems += _consistent(out.name, produced[out.name], end)

    outputs = {t.name for t in graph.outputs}
    for tensor, end in produced.items():
        if tensor not in consumed and tensor not in outputs:
            problems.append(
                Problem(UNUSED_TENSOR, f"ensemble tensor '{tensor}' ({end.origin}) is never used", end.step, tensor)
            )

    cycle = find_cycle(upstream)
    if cycle is not None:
        path = " -> ".join(graph.steps[i].label for i in cycle)
        problems.append(Problem(CYCLE, f"steps form a cycle: {path}", cycle[0]))
    return problems


def find_cycle(upstream: Sequence[set[int]]) -> list[int] | None:
    """A cycle among steps (`upstream[i]`: the steps whose outputs step i reads) as a path in data-flow order
    [a, b, ..., a], or None. Depth-first from the lowest index, following the data flow."""
    downstream: list[list[int]] = [[] for _ in upstream]
    for index, sources in enumerate(upstream):
        for source in sorted(sources):
            downstream[source].append(index)
    done: set[int] = set()
    for start in range(len(upstream)):
        if start in done:
            continue
        path, on_path, todo = [start], {start}, [iter(downstream[start])]
        while todo:
            nxt = next(todo[-1], None)
            if nxt is None:
                done.add(path[-1])
                on_path.discard(path.pop())
                todo.pop()
            elif nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                todo.append(iter(downstream[nxt]))
    return None
