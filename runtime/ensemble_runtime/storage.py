"""The remote sources a server syncs into its local cache, and what the last syncs reported."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ensemble_runtime.registry import Registry
from ensemble_runtime.repository.sources import SyncReport

log = logging.getLogger(__name__)


class Source(Protocol):
    root: Path

    async def sync(
        self, models: Collection[str] | None = None, in_use: Collection[tuple[str, int]] = (), *, settle: bool = False
    ) -> SyncReport: ...

    def found_versions(self) -> dict[str, list[int]]: ...

    @property
    def config_digest(self) -> str | None: ...


@dataclass(slots=True)
class SourceStatus:
    label: str
    error: str = ""
    errors: dict[str, str] = field(default_factory=dict)
    last_success: float = 0.0  # unix time of the last sync whose listing worked
    failures: int = 0  # syncs whose listing failed, since start
    awaited: dict[str, tuple[int, ...]] = field(default_factory=dict)  # model -> versions still uploading


@dataclass
class Storage:
    """Syncs every source; keeps serving from the cache whatever a sync reports."""

    sources: Sequence[Source]
    registry: Registry
    status: list[SourceStatus] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.status = [SourceStatus(label=str(getattr(s, "label", "") or s.root)) for s in self.sources]

    @property
    def roots(self) -> list[Path]:
        return [s.root for s in self.sources]

    async def sync(self, models: Collection[str] | None = None, *, settle: bool = False) -> bool:
        """Sync all sources (or only `models`); True when anything changed in the cache.

        `settle` (explicit loads): decide completeness now by listing twice; a poll passes False so that a
        version is loaded only once two consecutive polls listed it the same.
        """
        changed = False
        in_use = self.registry.serving_pairs()
        for source, status in zip(self.sources, self.status, strict=True):
            report = await source.sync(models, in_use, settle=settle)
            changed |= report.changed
            if report.error:
                status.error = report.error
                status.failures += 1
                log.error("repository sync: %s", report.error)
            else:
                status.error = ""
                status.last_success = time.time()
            if models is None:
                status.errors = dict(report.errors)
            else:
                status.errors = {k: v for k, v in status.errors.items() if k.split("/")[0] not in models}
                status.errors.update(report.errors)
            for where, reason in report.errors.items():
                log.error("repository sync: %s: %s", where, reason)
            for name in report.synced:
                status.awaited.pop(name, None)
            status.awaited.update(report.awaited)
        return changed

    def model_errors(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for status in self.status:
            out.update(status.errors)
        return out

    def declared_models(self) -> set[str] | None:
        """The models a repository config file names (readiness waits for them); None while a config file
        has never been read, so nothing can say what it asks for."""
        declared: set[str] = set()
        for source in self.sources:
            names: frozenset[str] | None = getattr(source, "declared", frozenset())
            if names is None:
                return None
            declared |= names
        return declared

    def config_digest(self) -> str | None:
        """SHA-256 of the repository config file (the operator's repository.json) as last read, if any."""
        return next((source.config_digest for source in self.sources if source.config_digest), None)

    def awaited_versions(self) -> dict[str, list[int]]:
        """Model -> versions whose upload the last sync saw in flight and that its version policy will select."""
        return merge_versions(status.awaited for status in self.status)

    def found_versions(self) -> dict[str, list[int]]:
        """Model -> sorted versions the sources' last successful listings showed (merged over sources)."""
        return merge_versions(source.found_versions() for source in self.sources)


def merge_versions(maps: Iterable[Mapping[str, Iterable[int]]]) -> dict[str, list[int]]:
    merged: dict[str, set[int]] = {}
    for found in maps:
        for name, versions in found.items():
            merged.setdefault(name, set()).update(versions)
    return {name: sorted(versions) for name, versions in sorted(merged.items())}
