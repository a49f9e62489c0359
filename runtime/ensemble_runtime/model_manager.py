"""Loading and unloading models from the repository into the registry: load new, commit, then drain old."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime import poll_changes
from ensemble_runtime.config.config_files import ConfigFiles
from ensemble_runtime.config.labels import read_labels
from ensemble_runtime.config.model_config import (
    ConfigError,
    apply_defaults,
    backend_of,
    check_config,
    is_ensemble,
    parse_config_override,
)
from ensemble_runtime.config.names import load_failed, not_in_repository
from ensemble_runtime.config.paths import check_config_paths
from ensemble_runtime.ensemble.graph import build_graph
from ensemble_runtime.errors import InferenceError, internal, invalid, not_found, quote_name
from ensemble_runtime.keyed_locks import KeyedLocks
from ensemble_runtime.load_groups import Peek, closure, groups
from ensemble_runtime.load_journal import DIED_LOADING
from ensemble_runtime.memory import MemoryPolicy
from ensemble_runtime.registry import EnsembleState, LoadedVersion, ModelRecord, Registry, VersionState
from ensemble_runtime.repository.local import ModelLocation, infer_platform, scan_roots, version_fingerprint
from ensemble_runtime.repository.policy import select_versions
from ensemble_runtime.repository_index import IndexEntry, index_entries
from ensemble_runtime.version_loader import VersionLoader
from ensemble_runtime.version_sets import hold_for_uploads, resolve_ensemble_set

log = logging.getLogger(__name__)

ENSEMBLE_VERSION = 1  # an ensemble needs no version folder; it serves as version 1 unless folders say otherwise



@dataclass(frozen=True, slots=True)
class LoadFailure:
    """Why one model of a load operation failed; `before_loading`: it was not found, or its config refused."""

    message: str
    before_loading: bool = False

@dataclass
class _PreparedLoad:
    """What one load operation decided for one model, before commit."""

    record: ModelRecord
    served: tuple[int, ...]
    new: list[LoadedVersion] = field(default_factory=list)
    config: mc.ModelConfig | None = None  # the config the served versions will run with
    failed: bool = False  # some selected version did not load
    reverted: bool = False  # held on its old versions because a sibling step failed
    ensemble: EnsembleState | None = None


BeforeLoad = Callable[[Collection[str]], Awaitable[None]]
Uploading = Callable[[], Mapping[str, Collection[int]]]  # model -> versions storage saw still uploading
Declared = Callable[[], Collection[str] | None]  # models a repository config names (None: not read yet)


@dataclass
class ModelManager:
    roots: Sequence[Path]
    registry: Registry
    loader: VersionLoader
    before_load: BeforeLoad | None = None  # e.g. sync those models from S3 into the local cache
    uploading: Uploading | None = None  # e.g. Storage.awaited_versions
    configs: ConfigFiles = field(default_factory=ConfigFiles)  # config.pbtxt files, parsed off the loop
    declared: Declared | None = None  # e.g. Storage.declared_models
    explicit: bool = False  # --model-control-mode explicit: the load/unload API says what is asked for
    # The models the configuration asks for: readiness means each of them can answer (see `ready`).
    requested: set[str] = field(default_factory=set)
    _unknown_repository: bool = False  # a repository config that was never read: what it asks for is unknown
    _locks: KeyedLocks = field(default_factory=KeyedLocks)  # one per model: one model's load never blocks another's
    _sync_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one storage sync for a load at a time
    _budget_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # loads under a memory budget, one at a time
    _loading: set[asyncio.Task[object]] = field(default_factory=set)
    _locations: dict[str, ModelLocation] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.registry.resolve_ensemble_set = resolve_ensemble_set

    def scan(self) -> dict[str, ModelLocation]:
        self._locations = scan_roots(self.roots)
        return self._locations

    async def refresh_configs(self) -> dict[str, ModelLocation]:
        """Scan, and parse (in a worker thread) the config.pbtxt files that are new or changed since last time."""
        locations = self.scan()
        await self.configs.refresh(loc.path / "config.pbtxt" for loc in locations.values())
        return locations

    # ---- what is asked for ----------------------------------------------------------------------
    def want_repository(self) -> None:
        """Control modes none and poll: every model of the repositories (as last scanned) and of the repository
        config is asked for."""
        declared = self.declared() if self.declared is not None else ()
        self._unknown_repository = declared is None
        self.requested = set(self._locations) | set(declared or ())

    def note_requested(self, name: str) -> None:
        """An explicit load asked for `name`; a name no repository has leaves no trace."""
        if name in self._locations:
            self.requested.add(name)

    def ready(self) -> bool:
        """Every model the configuration asks for can answer a request."""
        if self._unknown_repository:
            return False
        for name in self.requested:
            rec = self.registry.records.get(name)
            if rec is None or not rec.ready:
                return False
        return True

    def abandon_loads(self) -> None:
        """Shutdown: cancel every load in progress (a hung backend thread is left behind, not waited for)."""
        for task in list(self._loading):
            task.cancel()

    def index(self, ready_only: bool = False) -> list[IndexEntry]:
        return index_entries(self._locations, self.registry.records, ready_only)

    async def load(
        self, names: Iterable[str], overrides: Mapping[str, str] | None = None, *, fetch: bool = True
    ) -> None:
        """Load (or re-sync) models and, for ensembles, their steps; switch all of them at once.

        `fetch`: bring these models from storage first (the load API); the poll loop has synced already.
        Loaded ensembles over any of these models join the operation, so their steps switch all or nothing.
        Models that share no ensemble load independently and concurrently, each group under its own models'
        locks: a load that hangs holds only its own models (until --model-load-timeout-secs).
        """
        task = asyncio.current_task()
        if task is not None:
            self._loading.add(task)
        try:
            await self._load(list(dict.fromkeys(names)), dict(overrides or {}), fetch)
        finally:
            if task is not None:
                self._loading.discard(task)

    async def _load(self, names: list[str], overrides: dict[str, str], fetch: bool) -> None:
        fetch = fetch and self.before_load is not None
        if fetch and self.before_load is not None:
            async with self._sync_lock:
                await self.before_load(names)
        await self.refresh_configs()
        wanted = self._closure(names, overrides)
        if fetch and self.before_load is not None and set(wanted) - set(names):
            async with self._sync_lock:
                await self.before_load(wanted)  # the ensemble's steps too
            await self.refresh_configs()
        outcomes = await asyncio.gather(
            *(self._load_group(group, overrides, fetch) for group in groups(self.registry.records, names, self._peeker(overrides))),
            return_exceptions=True,
        )
        failures: list[LoadFailure] = []
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
            failures.extend(outcome)
        if failures:
            message = "; ".join(dict.fromkeys(f.message for f in failures))
            # As Triton: a model it cannot find or whose config it cannot read or accept is INTERNAL (HTTP 500)
            # "failed to load '<model>'..."; a model found whose versions then fail to load is INVALID_ARGUMENT.
            raise internal(message) if any(f.before_loading for f in failures) else invalid(message)

    def _closure(self, names: list[str], overrides: Mapping[str, str]) -> list[str]:
        return closure(self.registry.records, names, self._peeker(overrides))

    def _peeker(self, overrides: Mapping[str, str]) -> Peek:
        return lambda name: self._peek_config(name, overrides.get(name))

    async def _load_group(self, seeds: list[str], overrides: Mapping[str, str], fetch: bool) -> list[LoadFailure]:
        held = self._closure(seeds, overrides)
        while True:
            async with self._locks.hold(held):
                wanted = self._closure(seeds, overrides)  # an ensemble over them may have loaded meanwhile
                if set(wanted) <= set(held):
                    return await self._load_locked(wanted, overrides, fetch)
            held = list(dict.fromkeys(held + wanted))

    async def _load_locked(
        self, wanted: list[str], overrides: Mapping[str, str], fetch: bool
    ) -> list[LoadFailure]:
        """Prepare every model of `wanted` (this operation holds their locks), then switch them at once."""
        wanted, waits = hold_for_uploads(self.registry.records, wanted, self.uploading() if self.uploading else {})
        for note in waits:
            log.info("%s", note)
        loads: dict[str, _PreparedLoad] = {}
        errors = [LoadFailure(f"not switched: {note}") for note in waits] if fetch else []
        failed: set[str] = set()
        for name in wanted:
            try:
                loads[name] = await self._prepare(name, overrides.get(name), loads)
            except (ConfigError, InferenceError) as exc:
                message = str(exc)
                if name in self._locations:  # a name no repository has keeps no record
                    self.registry.record(name).reason = message
                failed.add(name)
                log.error("%s", load_failed(name, message))
                errors.append(LoadFailure(load_failed(name, message), before_loading=True))
        failed |= {name for name, load in loads.items() if load.failed}
        self._keep_old_sets(loads, failed)
        self._commit(list(loads.values()))
        for load in loads.values():
            if load.record.reason:
                errors.append(LoadFailure(f"failed to load '{load.record.name}': {load.record.reason}"))
            if load.record.ensemble is not None and load.record.ensemble.reason:
                errors.append(LoadFailure(f"failed to load '{load.record.name}': {load.record.ensemble.reason}"))
        return errors

    def _peek_config(self, name: str, override: str | None) -> mc.ModelConfig | None:
        try:
            if override:
                return parse_config_override(override, f"config override for '{name}'")
            location = self._locations.get(name)
            return self.configs.read(location.path / "config.pbtxt") if location else None
        except (ConfigError, OSError):
            return None

    def _read_config(self, location: ModelLocation, override: str | None) -> mc.ModelConfig:
        if location.error:
            raise ConfigError(location.error)
        if override:
            raw = parse_config_override(override, f"config override for '{location.name}'")
            if not raw.backend and not raw.platform:  # as Triton: the backend follows from the model's files
                inferred = infer_platform(location)
                raw.backend, raw.platform = inferred.backend, inferred.platform
        else:
            found = self.configs.read(location.path / "config.pbtxt")
            raw = found if found is not None else infer_platform(location)
        config = apply_defaults(raw, location.name)
        check_config(config, location.name)
        check_config_paths(config, location.path, location.versions.values())  # before anything is opened
        return config

    def _keep_old_sets(self, loads: Mapping[str, _PreparedLoad], failed: set[str]) -> None:
        """All or nothing per ensemble: if any of its steps failed to roll, none of them switch."""
        for load in loads.values():
            if load.ensemble is None:
                continue
            group = {s.model_name for s in load.ensemble.graph.steps} | {load.record.name}
            if not group & failed:
                continue
            for member in group:
                other = loads.get(member)
                if other is None or not other.record.served or (other.served == other.record.served and not other.new):
                    continue
                log.warning("ensemble '%s': not switching '%s' because %s failed to load",
                            load.record.name, member, ", ".join(sorted(group & failed)))
                other.served = other.record.served
                other.config = other.record.config
                other.reverted = True
                if not other.record.reason:
                    other.record.reason = (
                        f"new version(s) held back: ensemble '{load.record.name}' also needs "
                        f"{', '.join(sorted(group & failed))}, which failed to load"
                    )

    async def _prepare(self, name: str, override: str | None, pending: Mapping[str, _PreparedLoad]) -> _PreparedLoad:
        location = self._locations.get(name)
        if location is None:
            raise not_found(not_in_repository(name))
        config = self._read_config(location, override)
        rec = self.registry.record(name)
        rec.explicitly_unloaded = False
        rec.reason = ""
        if is_ensemble(config):
            return self._prepare_ensemble(rec, location, config, pending)
        backend = self.loader.backends.get(backend_of(config))
        if backend is None:
            raise ConfigError(f"model '{name}': backend '{backend_of(config)}' is not available in this runtime")
        wanted = select_versions(config.version_policy, location.versions)
        # versions that were loading when the process died: skipped, the policy's next pick serves instead
        died = self.loader.died_loading(name, config, {v: location.versions[v] for v in wanted.selected})
        selection = select_versions(config.version_policy, set(location.versions) - set(died)) if died else wanted
        if not selection.selected and not died:
            missing = f" (asked for {list(selection.missing)})" if selection.missing else ""
            raise ConfigError(f"model '{name}': no version available under its version policy{missing}")
        load = _PreparedLoad(record=rec, served=())
        failures: list[str] = [f"version {v} not found in the repository" for v in wanted.missing]
        for version, fingerprint in died.items():
            load.new.append(LoadedVersion(model=name, version=version, config=config, scheduler=None,
                                          state=VersionState.UNAVAILABLE, reason=DIED_LOADING, fingerprint=fingerprint))
            failures.append(f"version {version}: {DIED_LOADING}")
        ready: list[int] = []
        for version in selection.selected:
            path = location.versions[version]
            fingerprint = version_fingerprint(config, path)
            current = rec.versions.get(version)
            if current is not None and current.state == VersionState.READY and current.fingerprint == fingerprint:
                current.reason = ""  # the files are back to what is loaded: an earlier failed copy is moot
                ready.append(version)
                continue
            # loads under a memory budget run one at a time, so that each sees what the others took
            async with self._budget_lock if self.loader.budgeted else contextlib.nullcontext():
                reason = self.loader.over_budget(path, self.registry.loaded_versions())
                if reason and self.loader.budget.policy == MemoryPolicy.DRAIN_THEN_SWAP and rec.served:
                    # not zero-downtime: the model stops serving while its old versions drain and unload
                    log.warning("model '%s' version %d: %s; draining the old version(s) first", name, version, reason)
                    self.registry.retire(self.registry.commit({name: ()}))
                    await self.registry.wait_retired()
                    reason = self.loader.over_budget(path, self.registry.loaded_versions())
                if reason:
                    lv = LoadedVersion(model=name, version=version, config=config, scheduler=None,
                                       state=VersionState.UNAVAILABLE, reason=reason)
                    log.error("not loading model '%s' version %d: %s", name, version, reason)
                else:
                    lv = await self.loader.load(name, config, version, path, location.path, backend,
                                                 fingerprint)
            lv.fingerprint = fingerprint
            load.new.append(lv)
            if lv.state == VersionState.UNAVAILABLE:
                failures.append(f"version {version}: {lv.reason}")
            else:
                ready.append(version)
        load.failed = bool(failures)
        if failures and rec.served:
            # A failed new version never takes traffic: keep serving what was served before.
            rec.reason = "; ".join(failures) + f" (still serving version(s) {list(rec.served)})"
            load.served = rec.served
            load.config = rec.config
        else:
            rec.reason = "; ".join(failures)
            load.served = tuple(ready)
            newest = next((lv for lv in reversed(load.new) if lv.state != VersionState.UNAVAILABLE), None)
            if newest is not None:
                load.config = newest.config
            elif load.served and rec.versions.get(load.served[-1]) is not None:
                load.config = rec.versions[load.served[-1]].config
            else:
                load.config = rec.config or config
        return load

    def _prepare_ensemble(
        self, rec: ModelRecord, location: ModelLocation, config: mc.ModelConfig, pending: Mapping[str, _PreparedLoad]
    ) -> _PreparedLoad:
        step_configs: dict[str, mc.ModelConfig] = {}
        available: dict[str, list[int]] = {}
        for step in config.ensemble_scheduling.step:
            prepared = pending.get(step.model_name)  # loaded in this same operation, not committed yet
            step_rec = self.registry.records.get(step.model_name)
            step_config = prepared.config if prepared is not None else (step_rec.config if step_rec else None)
            if step_config is not None:
                step_configs[step.model_name] = step_config
                available[step.model_name] = list(prepared.served if prepared is not None else step_rec.served if step_rec else ())
        graph = build_graph(config, step_configs, available)
        version = max(location.versions) if location.versions else ENSEMBLE_VERSION
        lv = rec.versions.get(version)
        if lv is None:
            lv = LoadedVersion(model=rec.name, version=version, config=config, scheduler=None)
            rec.versions[version] = lv
        lv.config = config
        lv.labels = read_labels(config, location.path)
        lv.state = VersionState.READY
        return _PreparedLoad(record=rec, served=(version,), config=config, ensemble=EnsembleState(graph=graph))

    def _commit(self, loads: list[_PreparedLoad]) -> None:
        rejected: list[LoadedVersion] = []
        for load in loads:
            if load.config is not None:
                load.record.config = load.config
            if load.ensemble is not None:
                load.record.ensemble = load.ensemble
            for lv in load.new:
                kept = load.record.versions.get(lv.version)
                if lv.state == VersionState.UNAVAILABLE:
                    if lv.version in load.served and kept is not None and kept is not lv:
                        # A new copy of a served version number failed (files changed in place, a bad
                        # override): as for a new number, the loaded copy keeps serving; say why it was kept.
                        kept.reason = f"a new copy of this version failed to load; the loaded copy keeps serving: {lv.reason}"
                    else:
                        load.record.versions[lv.version] = lv  # keep the failure visible
                elif lv.version in load.served and not load.reverted:
                    load.record.versions[lv.version] = lv
                else:
                    rejected.append(lv)
        dropped = self.registry.commit({load.record.name: load.served for load in loads})
        self.registry.retire(dropped + rejected)

    async def unload(self, name: str) -> None:
        rec = self.registry.records.get(name)
        if rec is None or not rec.versions:  # checked before locking: unknown names leave no lock behind
            raise not_found(f"failed to unload {quote_name(name)}: model is not loaded")
        async with self._locks.hold([name]):
            rec = self.registry.records.get(name)
            if rec is None or not rec.versions:
                raise not_found(f"failed to unload {quote_name(name)}: model is not loaded")
            if self.explicit:
                self.requested.discard(name)
            rec.explicitly_unloaded = True
            dropped = self.registry.commit({name: ()})
            dropped.extend(lv for lv in rec.versions.values() if lv.scheduler is None and lv not in dropped)
            rec.ensemble = None
            self.registry.refresh_ensembles()
            self.registry.retire(dropped)
            for lv in list(rec.versions.values()):
                if lv.scheduler is None:
                    del rec.versions[lv.version]
            rec.reason = ""
            log.info("unloading model '%s'", name)

    def changed_models(self) -> list[str]:
        """Models whose repository content differs from what is loaded (poll mode); scans the repository."""
        self.scan()
        return poll_changes.changed_models(
            self._locations, self.registry.records, lambda location: self._read_config(location, None)
        )

    def removed_models(self) -> list[str]:
        """Loaded models whose directory was gone from every repository at the last scan (poll mode unloads them)."""
        return poll_changes.removed_models(self._locations, self.registry.records)
