"""Ensemble graph validation on the CR specs (pure).

Every issue names the step and tensor it is about. The same checks run in the admission webhook and
in the reconciler. A reference to a Model that does not exist is refused at admission (apply the Models
first: `kubectl apply -f models.yaml -f ensemble.yaml`); a pinned version the repository has not shown yet
is only a warning there (storage may gain it), see `Issue.admission_warning`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .api.v1alpha1 import EnsembleSpec, Model, TensorSpec, normalize_data_type

MISSING_MODEL = "missing-model"
DUPLICATE_PRODUCER = "duplicate-producer"
UNPRODUCED_TENSOR = "unproduced-tensor"
UNPRODUCED_OUTPUT = "unproduced-output"
CYCLE = "cycle"
UNKNOWN_MODEL_INPUT = "unknown-model-input"
UNKNOWN_MODEL_OUTPUT = "unknown-model-output"
UNMAPPED_MODEL_INPUT = "unmapped-model-input"
DTYPE_MISMATCH = "dtype-mismatch"
SHAPE_MISMATCH = "shape-mismatch"
BATCH_SIZE = "batch-size"
VERSION_NOT_FOUND = "version-not-found"
VERSION_NOT_SERVED = "version-not-served"
CONFLICTING_S3 = "conflicting-s3"

_DEPENDS_ON_OTHER_OBJECTS = frozenset({VERSION_NOT_FOUND})


@dataclass(frozen=True)
class Issue:
    code: str
    message: str
    step: str | None = None
    tensor: str | None = None

    @property
    def admission_warning(self) -> bool:
        """True when the issue may resolve itself (storage gaining a version): warn, do not reject."""
        return self.code in _DEPENDS_ON_OTHER_OBJECTS


@dataclass(frozen=True)
class _Side:
    """One end of a tensor edge: who, its dtype and full shape (batch dim included), if known."""

    label: str
    step: str | None
    data_type: str | None
    shape: tuple[int, ...] | None


def _full_shape(spec: TensorSpec, batching: bool) -> tuple[int, ...]:
    return ((-1,) if batching else ()) + tuple(spec.dims)


def _shapes_compatible(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b, strict=True))


def _fmt_shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _model_batching(model: Model, ensemble_batching: bool) -> bool:
    mbs = model.spec.max_batch_size
    return ensemble_batching if mbs is None else mbs > 0


def _tensor_side(label: str, step: str | None, spec: TensorSpec | None, batching: bool) -> _Side:
    if spec is None:
        return _Side(label, step, None, None)
    return _Side(label, step, normalize_data_type(spec.data_type), _full_shape(spec, batching))


def _compare(producer: _Side, consumer: _Side, tensor: str) -> list[Issue]:
    issues: list[Issue] = []
    if producer.data_type and consumer.data_type and producer.data_type != consumer.data_type:
        issues.append(
            Issue(
                DTYPE_MISMATCH,
                f"tensor '{tensor}': {consumer.label} expects {consumer.data_type} but {producer.label} "
                f"produces {producer.data_type}",
                consumer.step or producer.step,
                tensor,
            )
        )
    if (
        producer.shape is not None
        and consumer.shape is not None
        and not _shapes_compatible(producer.shape, consumer.shape)
    ):
        issues.append(
            Issue(
                SHAPE_MISMATCH,
                f"tensor '{tensor}': {consumer.label} expects shape {_fmt_shape(consumer.shape)} "
                f"(batch dimension included) but {producer.label} produces {_fmt_shape(producer.shape)}",
                consumer.step or producer.step,
                tensor,
            )
        )
    return issues


def _find_cycle(edges: Mapping[str, set[str]], order: Sequence[str]) -> list[str] | None:
    """A cycle in the step graph as a path [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in order:
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def _check_versions(spec: EnsembleSpec, models: Mapping[str, Model]) -> list[Issue]:
    issues: list[Issue] = []
    for step in spec.steps:
        model = models.get(step.model_ref.name)
        if model is None or step.model_version == -1:
            continue
        version, policy, found = step.model_version, model.spec.version_policy, model.status.versions_found
        name = step.model_ref.name
        if found is not None and version not in found:
            issues.append(
                Issue(
                    VERSION_NOT_FOUND,
                    f"step '{step.name}' pins version {version} of Model '{name}', which has versions "
                    f"{sorted(found)} in its repository",
                    step.name,
                )
            )
        elif (policy.specific is not None or found is not None) and not policy.selects(version, found or []):
            issues.append(
                Issue(
                    VERSION_NOT_SERVED,
                    f"step '{step.name}' pins version {version} of Model '{name}', which its version policy "
                    f"{policy.summary()} does not serve",
                    step.name,
                )
            )
    return issues


def _check_s3(spec: EnsembleSpec, models: Mapping[str, Model]) -> list[Issue]:
    """All S3 models of one ensemble share the pod: one endpoint, region and credential source."""
    seen: dict[str, tuple[str, str]] = {}
    issues: list[Issue] = []
    for step in spec.steps:
        model = models.get(step.model_ref.name)
        if model is None or model.spec.s3 is None:
            continue
        s3 = model.spec.s3
        model_name = model.metadata.name or step.model_ref.name
        values = {
            "endpointUrl": s3.endpoint_url or "",
            "region": s3.region or "",
            "credentials": (
                f"secret {s3.secret_ref.name}"
                if s3.secret_ref
                else f"serviceAccount {s3.service_account_name}"
                if s3.service_account_name
                else ""
            ),
        }
        for key, value in values.items():
            if not value:
                continue
            if key in seen and seen[key][1] != value:
                issues.append(
                    Issue(
                        CONFLICTING_S3,
                        f"step '{step.name}': Model '{model_name}' sets s3 {key}"
                        f" '{value}', Model '{seen[key][0]}' sets '{seen[key][1]}' (one pod: one S3 setup)",
                        step.name,
                    )
                )
            seen.setdefault(key, (model_name, value))
    return issues


def validate_ensemble(spec: EnsembleSpec, models: Mapping[str, Model]) -> list[Issue]:
    """All problems of the ensemble graph; `models` maps Model name -> Model in the namespace."""
    issues: list[Issue] = []
    batching = spec.max_batch_size > 0
    producers: dict[str, _Side] = {
        t.name: _tensor_side(f"ensemble input '{t.name}'", None, t, batching) for t in spec.inputs
    }
    for step in spec.steps:
        model = models.get(step.model_ref.name)
        if model is None:
            issues.append(
                Issue(
                    MISSING_MODEL,
                    f"step '{step.name}' references Model '{step.model_ref.name}', which does "
                    "not exist in this namespace",
                    step.name,
                )
            )
        declared = {t.name: t for t in model.spec.outputs} if model else {}
        step_batching = _model_batching(model, batching) if model else batching
        mbs = model.spec.max_batch_size if model else None
        if batching and mbs is not None and mbs < spec.max_batch_size:
            issues.append(
                Issue(
                    BATCH_SIZE,
                    f"step '{step.name}': Model '{step.model_ref.name}' has maxBatchSize "
                    f"{mbs}, below the ensemble's {spec.max_batch_size}",
                    step.name,
                )
            )
        for model_out, tensor in sorted(step.output_map.items()):
            if declared and model_out not in declared:
                issues.append(
                    Issue(
                        UNKNOWN_MODEL_OUTPUT,
                        f"step '{step.name}' maps output '{model_out}' to tensor "
                        f"'{tensor}', but Model '{step.model_ref.name}' has no such output",
                        step.name,
                        tensor,
                    )
                )
            if tensor in producers:
                other = producers[tensor]
                issues.append(
                    Issue(
                        DUPLICATE_PRODUCER,
                        f"tensor '{tensor}' is produced by both {other.label} and step '{step.name}'",
                        step.name,
                        tensor,
                    )
                )
                continue
            label = f"step '{step.name}' output '{model_out}'"
            producers[tensor] = _tensor_side(label, step.name, declared.get(model_out), step_batching)

    edges: dict[str, set[str]] = {s.name: set() for s in spec.steps}
    for step in spec.steps:
        model = models.get(step.model_ref.name)
        declared = {t.name: t for t in model.spec.inputs} if model else {}
        step_batching = _model_batching(model, batching) if model else batching
        for name in sorted(set(declared) - set(step.input_map)):
            issues.append(
                Issue(
                    UNMAPPED_MODEL_INPUT,
                    f"step '{step.name}': input '{name}' of Model "
                    f"'{step.model_ref.name}' is not mapped to any tensor",
                    step.name,
                    name,
                )
            )
        for model_in, tensor in sorted(step.input_map.items()):
            if declared and model_in not in declared:
                issues.append(
                    Issue(
                        UNKNOWN_MODEL_INPUT,
                        f"step '{step.name}' maps tensor '{tensor}' to input '{model_in}', "
                        f"but Model '{step.model_ref.name}' has no such input",
                        step.name,
                        tensor,
                    )
                )
            producer = producers.get(tensor)
            if producer is None:
                issues.append(
                    Issue(
                        UNPRODUCED_TENSOR,
                        f"step '{step.name}' consumes tensor '{tensor}' (as input "
                        f"'{model_in}'), but no step and no ensemble input produces it",
                        step.name,
                        tensor,
                    )
                )
                continue
            if producer.step is not None:
                edges[producer.step].add(step.name)
            consumer = _tensor_side(
                f"step '{step.name}' input '{model_in}'", step.name, declared.get(model_in), step_batching
            )
            issues.extend(_compare(producer, consumer, tensor))

    for out in spec.outputs:
        producer = producers.get(out.name)
        if producer is None:
            issues.append(
                Issue(
                    UNPRODUCED_OUTPUT,
                    f"ensemble output '{out.name}' is not produced by any step",
                    None,
                    out.name,
                )
            )
            continue
        issues.extend(
            _compare(producer, _tensor_side(f"ensemble output '{out.name}'", None, out, batching), out.name)
        )

    cycle = _find_cycle(edges, [s.name for s in spec.steps])
    if cycle is not None:
        issues.append(Issue(CYCLE, "steps form a cycle: " + " -> ".join(cycle), cycle[0]))
    issues.extend(_check_versions(spec, models))
    issues.extend(_check_s3(spec, models))
    return issues


def summarize(issues: Sequence[Issue], limit: int = 5) -> str:
    """One message for a condition or an admission response."""
    text = "; ".join(i.message for i in issues[:limit])
    if len(issues) > limit:
        text += f"; and {len(issues) - limit} more"
    return text
