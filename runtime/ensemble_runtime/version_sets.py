"""Which version set an ensemble serves, and when its serving models may not switch (pure, over the registry).

- `resolve_ensemble_set`: the loaded version each step of an ensemble runs now (the registry calls it at
  every commit, so each request resolves one consistent set).
- `hold_for_uploads`: the serving members of a loaded ensemble one of whose models has a version still
  uploading stay out of a load, so the ensemble switches once, to the whole new set, when the upload is done.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from ensemble_runtime.errors import unavailable
from ensemble_runtime.registry import LoadedVersion, ModelRecord, Registry


def resolve_ensemble_set(registry: Registry, rec: ModelRecord) -> dict[int, LoadedVersion]:
    """The version each step of an ensemble runs now; raises naming the step that is not ready."""
    assert rec.ensemble is not None
    graph = rec.ensemble.graph
    chosen: dict[int, LoadedVersion] = {}
    for step in graph.steps:
        step_rec = registry.records.get(step.model_name)
        if step_rec is None or not step_rec.served:
            raise unavailable(f"ensemble '{rec.name}': step model '{step.model_name}' is not ready")
        if step.model_version == -1:
            lv = step_rec.versions[step_rec.served[-1]]
        elif step.model_version in step_rec.served:
            lv = step_rec.versions[step.model_version]
        else:
            raise unavailable(
                f"ensemble '{rec.name}': step model '{step.model_name}' version {step.model_version} is not ready"
            )
        chosen[step.index] = lv
    return chosen


def hold_for_uploads(
    records: Mapping[str, ModelRecord], wanted: list[str], uploading: Mapping[str, Collection[int]]
) -> tuple[list[str], list[str]]:
    """Leave out the serving members of each loaded ensemble one of whose models has a version still
    uploading, so that the ensemble switches once, to the whole new set, when the upload is complete
    (steps uploaded together never serve half old, half new). Returns what to load and why not the rest."""
    busy_versions = {name: sorted(v) for name, v in uploading.items() if v}
    if not busy_versions:
        return wanted, []
    held: set[str] = set()
    notes: list[str] = []
    for rec in records.values():
        if rec.ensemble is None or not rec.served or rec.name not in wanted:
            continue
        group = {step.model_name for step in rec.ensemble.graph.steps} | {rec.name}
        busy = [f"'{name}' version(s) {busy_versions[name]}" for name in sorted(group) if name in busy_versions]
        members = sorted(name for name in group if name in wanted and _serving(records, name))
        if not busy or not members:
            continue
        held.update(members)
        notes.append(
            f"ensemble '{rec.name}': {', '.join(busy)} still uploading; "
            f"{', '.join(members)} keep serving their current versions until the upload is complete"
        )
    return [name for name in wanted if name not in held], notes


def _serving(records: Mapping[str, ModelRecord], name: str) -> bool:
    rec = records.get(name)
    return rec is not None and bool(rec.served)
