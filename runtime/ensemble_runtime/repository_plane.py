"""The repository side of the data plane: Triton's model repository extension (index, load, unload) and the
storage status (`GET /v2/repository/status`). The transports call it for those requests and `DataPlane` for
the rest (inference, health, metadata, statistics), as MLServer and KServe divide them."""

from __future__ import annotations

from dataclasses import dataclass

from ensemble_contract.status import SourceStatus, StorageStatus

from ensemble_runtime.config.names import load_failed, not_in_repository, valid_model_name
from ensemble_runtime.errors import internal, unavailable
from ensemble_runtime.model_manager import ModelManager
from ensemble_runtime.repository_index import IndexEntry
from ensemble_runtime.storage import Storage, merge_versions

# Triton's answer (UNAVAILABLE) to load/unload in control modes none and poll
CONTROL_REFUSED = "explicit model load / unload is not allowed if polling is enabled"


@dataclass
class RepositoryPlane:
    manager: ModelManager
    storage: Storage
    repository_control: bool = False  # load/unload answer only in explicit model control mode, as in Triton

    def storage_status(self) -> StorageStatus:
        """What the last syncs of remote repositories reported (for operators and probes), and `models`: the
        versions found in storage per model (remote listings, plus the version folders of plain local
        repositories), `uploading`: versions seen mid-upload that the version policy will select once complete,
        and `config_digest`: the SHA-256 of the repository config file as last applied (None without one)."""
        cached = set(self.storage.roots)
        local = {
            name: list(loc.versions) for name, loc in self.manager.scan().items() if loc.path.parent not in cached
        }
        return StorageStatus(
            sources=[
                SourceStatus(
                    source=s.label, error=s.error, errors=s.errors, last_success=s.last_success, failures=s.failures
                )
                for s in self.storage.status
            ],
            reachable=all(not s.error for s in self.storage.status),
            models=merge_versions([self.storage.found_versions(), local]),
            uploading=self.storage.awaited_versions(),
            config_digest=self.storage.config_digest(),
        )

    def repository_index(self, ready_only: bool = False) -> list[IndexEntry]:
        self.manager.scan()
        entries = self.manager.index(ready_only)
        if ready_only:
            return entries
        # versions that could not be fetched from storage never reached the loader: report them too
        known = {(e.name, e.version) for e in entries}
        for where, reason in sorted(self.storage.model_errors().items()):
            name, _, version = where.partition("/")
            if (name, version) not in known:
                entries.append(IndexEntry(name, version, "UNAVAILABLE", f"storage: {reason}"))
        return entries

    def require_repository_control(self) -> None:
        """Refuse load/unload outside explicit mode (transports call it before reading the request body)."""
        if not self.repository_control:
            raise unavailable(CONTROL_REFUSED)

    async def load(self, name: str, config_override: str | None = None) -> None:
        self.require_repository_control()
        if not valid_model_name(name):  # never looked up: the answer an unknown name gets
            raise internal(load_failed(name, not_in_repository(name)))
        try:
            await self.manager.load([name], {name: config_override} if config_override else None)
        finally:  # asked for from now on, loaded or not (not if no repository has it)
            self.manager.note_requested(name)

    async def unload(self, name: str) -> None:
        self.require_repository_control()
        await self.manager.unload(name)
