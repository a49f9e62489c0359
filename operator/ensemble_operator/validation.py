"""Ensemble validation on the CR specs (pure): the runtime's graph rules (ensemble_contract.graph) plus what
only the cluster knows (the Models exist, pinned versions, one S3 setup per pod).

Every issue names the step and tensor it is about. The same checks run in the admission webhook and
in the reconciler. A reference to a Model that does not exist is refused at admission (apply the Models
first: `kubectl apply -f models.yaml -f ensemble.yaml`); a pinned version the repository has not shown yet
is only a warning there (storage may gain it), see `Issue.admission_warning`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ensemble_contract.graph import (
    BATCH_SIZE,
    CYCLE,
    DTYPE_MISMATCH,
    DUPLICATE_PRODUCER,
    EMPTY_MAP,
    SHAPE_MISMATCH,
    UNKNOWN_MODEL_INPUT,
    UNKNOWN_MODEL_OUTPUT,
    UNMAPPED_MODEL_INPUT,
    UNPRODUCED_OUTPUT,
    UNPRODUCED_TENSOR,
    UNUSED_TENSOR,
    Graph,
    GraphStep,
    StepModel,
    Tensor,
    check_graph,
)

from .api.v1alpha1 import EnsembleSpec, Model, TensorSpec, normalize_data_type

__all__ = [
    "BATCH_SIZE",
    "CONFLICTING_S3",
    "CYCLE",
    "DTYPE_MISMATCH",
    "DUPLICATE_PRODUCER",
    "EMPTY_MAP",
    "MISSING_MODEL",
    "SHAPE_MISMATCH",
    "UNKNOWN_MODEL_INPUT",
    "UNKNOWN_MODEL_OUTPUT",
    "UNMAPPED_MODEL_INPUT",
    "UNPRODUCED_OUTPUT",
    "UNPRODUCED_TENSOR",
    "UNUSED_TENSOR",
    "VERSION_NOT_FOUND",
    "VERSION_NOT_SERVED",
    "Issue",
    "summarize",
    "validate_ensemble",
]

MISSING_MODEL = "missing-model"
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


def _tensor(spec: TensorSpec) -> Tensor:
    return Tensor(spec.name, normalize_data_type(spec.data_type), tuple(spec.dims))


def _tensors(specs: Sequence[TensorSpec]) -> tuple[Tensor, ...] | None:
    """Declared tensors; None when the Model declares none (its repository's config.pbtxt says)."""
    return tuple(_tensor(t) for t in specs) if specs else None


def _step_model(model: Model) -> StepModel:
    return StepModel(_tensors(model.spec.inputs), _tensors(model.spec.outputs), model.spec.max_batch_size)


def _graph(spec: EnsembleSpec) -> Graph:
    return Graph(
        max_batch_size=spec.max_batch_size,
        inputs=tuple(_tensor(t) for t in spec.inputs),
        outputs=tuple(_tensor(t) for t in spec.outputs),
        steps=tuple(
            GraphStep(f"step '{step.name}'", step.model_ref.name, step.input_map, step.output_map)
            for step in spec.steps
        ),
    )


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
    """All problems of the ensemble; `models` maps Model name -> Model in the namespace. The graph rules are
    the runtime's own (ensemble_contract.graph); Models that do not exist, pinned versions and the pod's one
    S3 setup are checked here."""
    issues = [
        Issue(
            MISSING_MODEL,
            f"step '{step.name}' references Model '{step.model_ref.name}', which does not exist in this namespace",
            step.name,
        )
        for step in spec.steps
        if step.model_ref.name not in models
    ]
    described = {
        step.model_ref.name: _step_model(models[step.model_ref.name])
        for step in spec.steps
        if step.model_ref.name in models
    }
    for problem in check_graph(_graph(spec), described):
        step = spec.steps[problem.step].name if problem.step is not None else None
        issues.append(Issue(problem.code, problem.message, step, problem.tensor))
    issues.extend(_check_versions(spec, models))
    issues.extend(_check_s3(spec, models))
    return issues


def summarize(issues: Sequence[Issue], limit: int = 5) -> str:
    """One message for a condition or an admission response."""
    text = "; ".join(i.message for i in issues[:limit])
    if len(issues) > limit:
        text += f"; and {len(issues) - limit} more"
    return text
