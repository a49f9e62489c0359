"""Status computation from observed state (pure): conditions Ready/Progressing/Degraded, phase,
replicas, served versions. Conditions keep their lastTransitionTime unless their status flips, so an
unchanged world computes an identical status and nothing gets written."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ensemble_contract.status import decode_storage_status

from .api.v1alpha1 import Condition, Ensemble, EnsembleStatus, Model, ModelStatus
from .api.v1alpha1.conditions import ConditionType, Reason
from .render.common import grpc_endpoint
from .validation import Issue, summarize


@dataclass(frozen=True)
class PodReport:
    """What one runtime pod reported: readiness and GET /v2/ensembles/<name>/versions (None: unknown)."""

    name: str
    ready: bool
    versions: dict[str, int] | None
    # Why a pod that is not ready cannot become ready, from the pod's own status: the scheduler's
    # Unschedulable message, or a waiting container's reason (ImagePullBackOff, CrashLoopBackOff, ...).
    problem: str | None = None
    # GET /v2/repository/status: why the model store cannot be listed (None: reachable, or unknown).
    storage: str | None = None
    # POST /v2/repository/index: "<model> <version>: <reason>" for each version that failed to load.
    failed_versions: tuple[str, ...] = ()
    # GET /v2/repository/status "models": model -> versions found in storage (None: unknown).
    found: Mapping[str, tuple[int, ...]] | None = None
    # GET /v2/repository/status "config_digest": SHA-256 of the repository.json the pod last applied.
    config_digest: str | None = None


def storage_problem(doc: Any) -> str | None:
    """The runtime's storage status as one line when some source cannot be reached, else None."""
    status = decode_storage_status(doc)
    return status.problem() if status is not None else None


def config_digest_of(doc: Any) -> str | None:
    """The runtime's storage status `config_digest` (hex SHA-256 of the repository.json it last applied)."""
    status = decode_storage_status(doc)
    return (status.config_digest or None) if status is not None else None


def found_versions(doc: Any) -> dict[str, tuple[int, ...]] | None:
    """The runtime's storage status `models` (the versions each model's storage listing showed) as sorted
    tuples; None when absent (an older runtime) or when the document is not a storage status."""
    status = decode_storage_status(doc)
    return status.found() if status is not None else None


def versions_found(pods: Sequence[PodReport], models: Collection[str]) -> dict[str, list[int]]:
    """For each of `models` some ready pod reported: the union of the versions ready pods found in storage.
    Models no ready pod reported are left out (their last known versions stand)."""
    union: dict[str, set[int]] = {}
    for pod in pods:
        if pod.ready and pod.found is not None:
            for name in models:
                if name in pod.found:
                    union.setdefault(name, set()).update(pod.found[name])
    return {name: sorted(versions) for name, versions in sorted(union.items())}


def failed_versions(index: Any) -> tuple[str, ...]:
    """Entries of the runtime's repository index that are UNAVAILABLE with a reason (a load or fetch
    failure; "unloaded" is not one), as "<model> <version>: <reason>", sorted."""
    if not isinstance(index, list):
        return ()
    found = {
        f"{e['name']} {e.get('version') or '-'}: {e['reason']}"
        for e in index
        if isinstance(e, dict) and e.get("state") == "UNAVAILABLE" and e.get("reason") not in (None, "", "unloaded")
    }
    return tuple(sorted(found))


def _grouped(pods: Sequence[PodReport], what: Callable[[PodReport], Sequence[str]]) -> str | None:
    by_problem: dict[str, list[str]] = {}
    for pod in pods:
        if pod.ready:
            for problem in what(pod):
                by_problem.setdefault(problem, []).append(pod.name)
    if not by_problem:
        return None
    return "; ".join(f"pod {', '.join(sorted(names))}: {problem}" for problem, names in sorted(by_problem.items()))


def storage_problems(pods: Sequence[PodReport]) -> str | None:
    """Ready pods that cannot reach the model store (they keep serving what they have)."""
    return _grouped(pods, lambda p: [p.storage] if p.storage else [])


def load_failures(pods: Sequence[PodReport]) -> str | None:
    """Versions ready pods failed to load (they keep serving the previous version set)."""
    return _grouped(pods, lambda p: p.failed_versions)


def pod_problem(pod: dict[str, Any]) -> str | None:
    """What keeps a pod from running, in the words of the scheduler or the kubelet (None: nothing known)."""
    status = pod.get("status", {})
    for cond in status.get("conditions", []):
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("reason"):
            return f"{cond['reason']}: {cond.get('message', '')}".rstrip(": ")
    for container in status.get("containerStatuses", []):
        waiting = container.get("state", {}).get("waiting") or {}
        if waiting.get("reason") in _STUCK_REASONS:
            return f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
    return None


# Waiting reasons that do not clear by themselves (ContainerCreating and PodInitializing do).
_STUCK_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CrashLoopBackOff",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)


def pod_problems(pods: Sequence[PodReport]) -> str | None:
    """One line naming the problems of the pods that are not ready (pods that share one are grouped)."""
    by_problem: dict[str, list[str]] = {}
    for pod in pods:
        if not pod.ready and pod.problem:
            by_problem.setdefault(pod.problem, []).append(pod.name)
    if not by_problem:
        return None
    return "; ".join(f"pod {', '.join(sorted(names))}: {problem}" for problem, names in sorted(by_problem.items()))


def _merge(previous: Sequence[Condition], new: Condition, now: str) -> Condition:
    for old in previous:
        if old.type == new.type and old.status == new.status:
            return new.model_copy(update={"last_transition_time": old.last_transition_time or now})
    return new.model_copy(update={"last_transition_time": now})


def _cond(kind: ConditionType, status: bool, reason: Reason | str, message: str, generation: int) -> Condition:
    return Condition(
        type=str(kind),
        status="True" if status else "False",
        reason=str(reason),
        message=message,
        observed_generation=generation,
    )


def served_versions(pods: Sequence[PodReport]) -> tuple[dict[str, int] | None, bool]:
    """The version set most ready pods serve, and whether all reporting ready pods agree."""
    sets = [p.versions for p in pods if p.ready and p.versions is not None]
    if not sets:
        return None, True
    counts = Counter(tuple(sorted(s.items())) for s in sets)
    best = counts.most_common(1)[0][0]
    return dict(best), len(counts) == 1


def summarize_versions(versions: dict[str, int] | None) -> str | None:
    if versions is None:
        return None
    return ",".join(f"{k}:{v}" for k, v in sorted(versions.items()))


def _rolled_out(deployment: dict[str, Any]) -> bool:
    """Whether the Deployment's current ReplicaSet has been available before: its Progressing condition says
    NewReplicaSetAvailable (it keeps saying so after a pod fails; a rollout replaces it with ReplicaSetUpdated)."""
    return any(
        c.get("type") == ConditionType.PROGRESSING and c.get("reason") == "NewReplicaSetAvailable"
        for c in deployment.get("status", {}).get("conditions", [])
    )


def _deployment_numbers(deployment: dict[str, Any]) -> tuple[int, int, int, int, bool, bool]:
    spec, st = deployment.get("spec", {}), deployment.get("status", {})
    desired = int(spec.get("replicas", 1))  # the API server defaults an unset spec.replicas to 1
    ready = int(st.get("readyReplicas", 0) or 0)
    updated = int(st.get("updatedReplicas", 0) or 0)
    total = int(st.get("replicas", 0) or 0)
    observed = int(st.get("observedGeneration", 0) or 0) >= int(deployment["metadata"].get("generation", 0) or 0)
    stalled = any(
        c.get("type") == ConditionType.PROGRESSING and c.get("reason") == Reason.PROGRESS_DEADLINE_EXCEEDED
        for c in st.get("conditions", [])
    )
    return desired, ready, updated, total, observed, stalled


def compute_status(
    ensemble: Ensemble,
    issues: Sequence[Issue],
    deployment: dict[str, Any] | None,
    pods: Sequence[PodReport],
    now: str,
    warnings: Sequence[Issue] = (),
) -> EnsembleStatus:
    gen = ensemble.metadata.generation
    versions, agree = served_versions(pods)
    replicas = ready = None
    if issues:
        msg = summarize(issues)
        conds = [
            _cond(ConditionType.READY, False, Reason.INVALID_SPEC, msg, gen),
            _cond(ConditionType.PROGRESSING, False, Reason.INVALID_SPEC, "the last valid spec keeps serving", gen),
            _cond(ConditionType.DEGRADED, True, Reason.INVALID_SPEC, msg, gen),
        ]
    elif deployment is None:
        conds = [
            _cond(ConditionType.READY, False, Reason.CREATING, "the runtime Deployment does not exist yet", gen),
            _cond(ConditionType.PROGRESSING, True, Reason.CREATING, "creating the runtime Deployment", gen),
            _cond(ConditionType.DEGRADED, False, Reason.AS_EXPECTED, "", gen),
        ]
    else:
        desired, ready, updated, replicas, observed, stalled = _deployment_numbers(deployment)
        done = observed and updated == desired and replicas == desired and ready == desired
        if desired == 0:
            ready_c = _cond(ConditionType.READY, False, Reason.SCALED_TO_ZERO, "no replicas requested", gen)
        elif ready == 0:
            ready_c = _cond(ConditionType.READY, False, Reason.NO_READY_REPLICAS, f"0/{desired} replicas ready", gen)
        else:
            reason = Reason.ALL_REPLICAS_READY if ready >= desired else Reason.PARTIALLY_READY
            ready_c = _cond(ConditionType.READY, True, reason, f"{ready}/{desired} replicas ready", gen)
        if not done:
            prog_c = _cond(ConditionType.PROGRESSING, True, Reason.ROLLING_OUT, f"{updated}/{desired} replicas updated", gen)
        elif not agree:
            prog_c = _cond(ConditionType.PROGRESSING, True, Reason.VERSION_SWITCH, "ready pods serve different version sets", gen)
        else:
            prog_c = _cond(ConditionType.PROGRESSING, False, Reason.ROLLOUT_COMPLETE, "", gen)
        problems = pod_problems(pods)
        if problems is not None:
            reason = Reason.PODS_UNSCHEDULABLE if "Unschedulable" in problems else Reason.PODS_FAILING
            deg_c = _cond(ConditionType.DEGRADED, True, reason, problems, gen)
        elif (storage := storage_problems(pods)) is not None:
            deg_c = _cond(ConditionType.DEGRADED, True, Reason.STORAGE_UNREACHABLE, storage, gen)
        elif (failed := load_failures(pods)) is not None:
            deg_c = _cond(ConditionType.DEGRADED, True, Reason.VERSION_LOAD_FAILED, failed, gen)
        elif stalled:
            deg_c = _cond(ConditionType.DEGRADED, True, Reason.PROGRESS_DEADLINE_EXCEEDED, "the rollout is stuck", gen)
        elif warnings:
            deg_c = _cond(ConditionType.DEGRADED, True, Reason.VERSION_NOT_FOUND, summarize(warnings), gen)
        elif done is False and observed and updated == desired and ready < desired and _rolled_out(deployment):
            # replicas lost after the rollout had completed; pods of a rollout still starting are Progressing
            deg_c = _cond(ConditionType.DEGRADED, True, Reason.REPLICAS_UNAVAILABLE, f"{ready}/{desired} replicas ready", gen)
        else:
            deg_c = _cond(ConditionType.DEGRADED, False, Reason.AS_EXPECTED, "", gen)
        conds = [ready_c, prog_c, deg_c]
    merged = [_merge(ensemble.status.conditions, c, now) for c in conds]
    by_type = {c.type: c.status == "True" for c in merged}
    if issues:
        phase = "Invalid"
    elif by_type[ConditionType.DEGRADED]:
        phase = "Degraded"
    elif by_type[ConditionType.PROGRESSING]:
        phase = "Progressing"
    elif by_type[ConditionType.READY]:
        phase = "Ready"
    else:
        phase = "Pending"
    return EnsembleStatus(
        phase=phase,  # type: ignore[arg-type]
        replicas=replicas,
        ready_replicas=ready,
        served_versions=versions,
        served_versions_summary=summarize_versions(versions),
        endpoint=grpc_endpoint(ensemble),
        conditions=merged,
        observed_generation=gen,
    )


def compute_model_status(
    model: Model,
    in_use_by: Sequence[str],
    now: str,
    deletion_blocked: str | None = None,
    found: Sequence[int] | None = None,
) -> ModelStatus:
    """Model status: its policy summary, an Accepted condition (plus DeletionBlocked while a deletion waits for
    the Ensembles that use it) and versionsFound: `found` (the union of what the runtime pods of the Ensembles
    using it found in storage, see `versions_found`), or as it stands when no pod has reported since start."""
    gen = model.metadata.generation
    users = ", ".join(sorted(in_use_by)) or "no Ensemble"
    conditions = [_cond(ConditionType.ACCEPTED, True, Reason.VALID, f"used by {users}", gen)]
    if deletion_blocked is not None:
        conditions.append(_cond(ConditionType.DELETION_BLOCKED, True, Reason.IN_USE, deletion_blocked, gen))
    return ModelStatus(
        policy=model.spec.version_policy.summary(),
        versions_found=list(found) if found is not None else model.status.versions_found,
        conditions=[_merge(model.status.conditions, c, now) for c in conditions],
        observed_generation=gen,
    )
