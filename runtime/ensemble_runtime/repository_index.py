"""The repository index (RepositoryIndex, POST /v2/repository/index): one entry per model version. Pure."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ensemble_runtime.registry import ModelRecord, VersionState


@dataclass(frozen=True, slots=True)
class IndexEntry:
    name: str
    version: str
    state: str
    reason: str


def index_entries(
    in_repository: Collection[str], records: Mapping[str, ModelRecord], ready_only: bool = False
) -> list[IndexEntry]:
    """Every model the repositories hold or the registry knows; `ready_only`: the READY versions alone."""
    entries: list[IndexEntry] = []
    for name in sorted(set(in_repository) | set(records)):
        rec = records.get(name)
        if rec is None or (not rec.versions and not rec.reason):
            if not ready_only:
                entries.append(IndexEntry(name, "", "", "unloaded" if rec else ""))
            continue
        if not rec.versions:
            if not ready_only:
                entries.append(IndexEntry(name, "", VersionState.UNAVAILABLE.value, rec.reason))
            continue
        for number, lv in sorted(rec.versions.items()):
            state = lv.state.value
            reason = lv.reason
            if rec.ensemble is not None and not rec.ready:
                state, reason = VersionState.UNAVAILABLE.value, rec.ensemble.reason or rec.reason
            if ready_only and state != VersionState.READY.value:
                continue
            entries.append(IndexEntry(name, str(number), state, reason))
    return entries
