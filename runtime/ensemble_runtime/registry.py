"""Loaded model versions, the versions each model serves, ensemble version sets, in-flight counts and drain.

Everything here runs on the event loop thread; `commit` is synchronous, so a switch of served versions
(for several models and every ensemble over them) is atomic with respect to requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.ensemble import EnsembleGraph
from ensemble_runtime.errors import invalid, not_found, quote_name, unavailable
from ensemble_runtime.scheduler import Scheduler
from ensemble_runtime.sequences import SequenceScheduler
from ensemble_runtime.stats import ModelStats

log = logging.getLogger(__name__)


class VersionState(enum.Enum):
    LOADING = "LOADING"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    UNLOADING = "UNLOADING"


@dataclass(eq=False)
class LoadedVersion:
    model: str
    version: int
    config: mc.ModelConfig
    scheduler: Scheduler | SequenceScheduler | None  # None for ensembles and failed versions
    stats: ModelStats = field(default_factory=ModelStats)
    state: VersionState = VersionState.LOADING
    reason: str = ""
    fingerprint: str = ""
    memory_bytes: int = 0
    labels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # output -> its label_filename's lines
    in_flight: int = 0
    drained: asyncio.Event | None = None  # made by `wait_idle` while requests are in flight; set by the last

    async def wait_idle(self) -> None:
        """Returns once no request is in flight on this version (at once when none is)."""
        while self.in_flight:
            if self.drained is None:
                self.drained = asyncio.Event()
            await self.drained.wait()


@dataclass(eq=False)
class EnsembleState:
    graph: EnsembleGraph
    steps: dict[int, LoadedVersion] = field(default_factory=dict)  # the version set served, per step index
    reason: str = ""
    # `describe`'s answer and the set it describes: a set is replaced whole (`refresh_ensembles`), never changed
    described: tuple[dict[int, LoadedVersion], str] | None = field(default=None, repr=False)

    def describe(self) -> str:
        """'model:version,...' for the set served now (each model once per distinct version)."""
        described = self.described
        if described is None or described[0] is not self.steps:
            described = self.described = (self.steps, describe_set(self.steps))
        return described[1]


def describe_set(steps: Mapping[int, LoadedVersion]) -> str:
    return ",".join(sorted({f"{lv.model}:{lv.version}" for lv in steps.values()}))


@dataclass(eq=False)
class ModelRecord:
    name: str
    config: mc.ModelConfig | None = None
    versions: dict[int, LoadedVersion] = field(default_factory=dict)
    served: tuple[int, ...] = ()
    reason: str = ""  # why the model (or its newest attempt) is not what was asked for
    ensemble: EnsembleState | None = None
    explicitly_unloaded: bool = False

    @property
    def ready(self) -> bool:
        if self.ensemble is not None:
            return bool(self.served) and bool(self.ensemble.steps) and not self.ensemble.reason
        return bool(self.served)

    def default_version(self) -> LoadedVersion | None:
        return self.versions[self.served[-1]] if self.served else None


def parse_version(version: str) -> int | None:
    """A requested version: '' is the default (None); otherwise plain decimal digits only, as a folder name is
    (no sign, spaces or other scripts' digits), else INVALID_ARGUMENT with Triton's message."""
    if not version:
        return None
    if not (version.isascii() and version.isdigit()):
        raise invalid(
            f"failed to get model version from specified version string {quote_name(version)}, "
            "version should be an integral value > 0"
        )
    return int(version)


# Computes an ensemble's version set from the registry, or raises ConfigError/InferenceError with a reason.
SetResolver = Callable[["Registry", ModelRecord], dict[int, LoadedVersion]]


@dataclass
class Registry:
    records: dict[str, ModelRecord] = field(default_factory=dict)
    resolve_ensemble_set: SetResolver | None = None
    retiring: set[asyncio.Task[None]] = field(default_factory=set)
    # called on the loop when the versions loaded change (a commit, a retired version closed): the heap settles
    changed: Callable[[], None] | None = None

    def record(self, name: str) -> ModelRecord:
        rec = self.records.get(name)
        if rec is None:
            rec = self.records[name] = ModelRecord(name)
        return rec

    def find(self, name: str, version: str) -> LoadedVersion:
        """The version a request for (name, version) runs on; '' means the model's default version."""
        rec = self.records.get(name)
        if not version and rec is not None and rec.served and (rec.ensemble is None or rec.ready):
            return rec.versions[rec.served[-1]]  # the common case, as below: the newest version served
        number = parse_version(version)
        shown = quote_name(name)
        if rec is None or (not rec.versions and not rec.reason):
            raise not_found(f"Request for unknown model: {shown} is not found")
        if number is not None:
            if number not in rec.versions:
                raise not_found(f"Request for unknown model: {shown} version {number} is not found")
            if number not in rec.served:
                lv = rec.versions[number]
                why = f": {lv.reason}" if lv.reason else ""
                raise unavailable(f"Request for unavailable model: {shown} version {number} is not ready{why}")
            found = rec.versions[number]
        else:
            default = rec.default_version()
            if default is None:  # not loaded (never, unloaded, or failed): NOT_FOUND, as Triton answers
                why = f": {rec.reason}" if rec.reason else ""
                raise not_found(f"Request for unknown model: {shown} has no available versions{why}")
            found = default
        if rec.ensemble is not None and not rec.ready:
            raise unavailable(f"Request for unavailable model: ensemble {shown} is not ready: {rec.ensemble.reason}")
        return found

    def ensemble_set(self, name: str) -> dict[int, LoadedVersion]:
        rec = self.records[name]
        assert rec.ensemble is not None
        return rec.ensemble.steps

    @staticmethod
    def acquire(lv: LoadedVersion) -> None:
        lv.in_flight += 1

    @staticmethod
    def release(lv: LoadedVersion) -> None:
        lv.in_flight -= 1
        if lv.in_flight == 0 and lv.drained is not None:  # someone waits for the version to be idle
            lv.drained.set()
            lv.drained = None

    @staticmethod
    @contextlib.contextmanager
    def holding(*versions: LoadedVersion) -> Iterator[None]:
        """Count one request in flight on each of `versions` for the block; retiring waits until they are idle.
        (A live sequence holds its version across calls with `acquire`/`release` themselves.)"""
        for lv in versions:
            Registry.acquire(lv)
        try:
            yield
        finally:
            for lv in versions:
                Registry.release(lv)

    def commit(self, served: Mapping[str, tuple[int, ...]]) -> list[LoadedVersion]:
        """Switch the served versions of several models at once and refresh every ensemble's set.

        Returns the versions that no longer take traffic; the caller retires them (drain, then close).
        """
        before = self._in_use()
        for name, versions in served.items():
            rec = self.record(name)
            rec.served = tuple(sorted(versions))
            for number in rec.served:
                rec.versions[number].state = VersionState.READY
        self.refresh_ensembles()
        after = self._in_use()
        dropped = [lv for lv in before if lv not in after]
        for lv in dropped:
            lv.state = VersionState.UNLOADING
        if self.changed is not None:
            self.changed()
        return dropped

    def refresh_ensembles(self) -> None:
        for rec in self.records.values():
            if rec.ensemble is None or not rec.served or self.resolve_ensemble_set is None:
                continue
            try:
                steps = self.resolve_ensemble_set(self, rec)
            except Exception as exc:
                rec.ensemble.reason = str(exc)
                rec.ensemble.steps = {}
                continue
            if steps != rec.ensemble.steps:
                log.info("ensemble '%s' now serves version set {%s}", rec.name, describe_set(steps))
            rec.ensemble.steps = steps
            rec.ensemble.reason = ""

    def _in_use(self) -> set[LoadedVersion]:
        used: set[LoadedVersion] = set()
        for rec in self.records.values():
            used.update(rec.versions[v] for v in rec.served if v in rec.versions)
            if rec.ensemble is not None:
                used.update(rec.ensemble.steps.values())
        return used

    def retire(self, versions: list[LoadedVersion]) -> None:
        for lv in versions:
            task = asyncio.get_running_loop().create_task(self._drain_and_close(lv))
            self.retiring.add(task)
            task.add_done_callback(self.retiring.discard)

    async def _drain_and_close(self, lv: LoadedVersion) -> None:
        await lv.wait_idle()
        if lv in self._in_use():  # taken back into service while draining
            lv.state = VersionState.READY
            return
        if lv.scheduler is not None:
            await lv.scheduler.close()
        rec = self.records.get(lv.model)
        if rec is not None and rec.versions.get(lv.version) is lv:
            del rec.versions[lv.version]
        log.info("unloaded model '%s' version %d", lv.model, lv.version)
        if self.changed is not None:
            self.changed()

    def loaded_versions(self) -> list[LoadedVersion]:
        return [lv for rec in self.records.values() for lv in rec.versions.values() if lv.scheduler is not None]

    def serving_pairs(self) -> set[tuple[str, int]]:
        """(model, version) pairs loaded now, served or draining: storage must keep their files."""
        return {(lv.model, lv.version) for lv in self.loaded_versions()}

    async def close(self) -> None:
        """Stop every loaded version's scheduler (server exit: callers have drained requests already)."""
        for lv in self.loaded_versions():
            assert lv.scheduler is not None
            await lv.scheduler.close()

    async def wait_retired(self) -> None:
        while self.retiring:
            await asyncio.gather(*list(self.retiring), return_exceptions=True)
