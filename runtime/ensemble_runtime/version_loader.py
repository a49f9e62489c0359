"""Loading one model version: memory budget, load journal, backend load, scheduler, warm-up. Failure =
UNAVAILABLE + reason."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.backends.base import (
    Backend,
    LoadContext,
    ModelCaller,
    ModelInstance,
    ModelStreamCaller,
    instance_slots,
)
from ensemble_runtime.batching import BatchPolicy
from ensemble_runtime.config.labels import read_labels
from ensemble_runtime.config.model_config import ConfigError
from ensemble_runtime.custom_metrics import CustomMetrics
from ensemble_runtime.errors import InferenceError, must_propagate
from ensemble_runtime.load_journal import LoadJournal
from ensemble_runtime.memory import MemoryBudget, describe
from ensemble_runtime.registry import LoadedVersion, Registry, VersionState
from ensemble_runtime.repository.local import version_fingerprint
from ensemble_runtime.scheduler import Scheduler
from ensemble_runtime.sequences import (
    FLAG_END,
    FLAG_START,
    SequenceScheduler,
    has_sequence_batching,
    settings_from_config,
)
from ensemble_runtime.warmup import WarmupError, warmup_requests

log = logging.getLogger(__name__)

DeviceFree = Callable[[], int | None]  # free accelerator memory in bytes, None without one


@dataclass
class VersionLoader:
    backends: Mapping[str, Backend]
    caller: ModelCaller
    cache_dir: Path | None = None
    budget: MemoryBudget = field(default_factory=MemoryBudget)
    device_free: DeviceFree | None = None
    journal: LoadJournal | None = None  # versions loading when the process last died (None: not kept)
    stream_caller: ModelStreamCaller | None = None  # BLS to decoupled models (exec(decoupled=True))
    custom_metrics: CustomMetrics | None = None  # Python models' own metric families (pb_utils.MetricFamily)

    def died_loading(self, name: str, config: mc.ModelConfig, versions: Mapping[int, Path]) -> dict[int, str]:
        """Those of `versions` (number -> path) that were loading, with the same fingerprint, when an earlier
        process died: number -> fingerprint. They are not loaded again until their content changes."""
        if self.journal is None or not self.journal.any_died(name):
            return {}
        found = {v: version_fingerprint(config, path) for v, path in versions.items()}
        return {v: fp for v, fp in found.items() if self.journal.died(name, v, fp)}
    timeout_secs: float = 0.0  # a load (backend load and warm-up) taking longer fails; 0: no limit
    max_instances: int = 0  # most instances one version may ask for; 0: no limit
    _abandoned: set[asyncio.Task[None]] = field(default_factory=set)  # schedulers of timed-out loads, closing

    @property
    def budgeted(self) -> bool:
        """Whether loads must fit a memory budget (then they are checked one at a time)."""
        return bool(self.budget.budget_bytes) or (self.device_free is not None and self.device_free() is not None)

    def over_budget(self, path: Path, loaded: Iterable[LoadedVersion]) -> str:
        """'' when a version at `path` fits next to what is loaded, else the reason it does not."""
        if not self.budget.budget_bytes and self.device_free is None:
            return ""
        need = self.budget.estimate(path)
        in_use = sum(lv.memory_bytes for lv in loaded if lv.scheduler is not None)
        available = self.device_free() if self.device_free is not None else None
        if self.budget.fits(need, in_use, available):
            return ""
        return f"memory budget: {describe(need, in_use, self.budget.budget_bytes, available)}"

    async def load(
        self, name: str, config: mc.ModelConfig, version: int, path: Path, model_path: Path, backend: Backend,
        fingerprint: str = "",
    ) -> LoadedVersion:
        """Load one version; with a journal and a fingerprint, the load is journaled while it runs."""
        journal = self.journal if fingerprint else None
        if journal is not None:
            await asyncio.to_thread(journal.begin, name, version, fingerprint)
        try:
            return await self._load(name, config, version, path, model_path, backend)
        finally:
            if journal is not None:
                await asyncio.to_thread(journal.end, name, version, fingerprint)

    async def _load(
        self, name: str, config: mc.ModelConfig, version: int, path: Path, model_path: Path, backend: Backend
    ) -> LoadedVersion:
        lv = LoadedVersion(model=name, version=version, config=config, scheduler=None)
        lv.memory_bytes = self.budget.estimate(path)
        scheduler: Scheduler | SequenceScheduler | None = None
        deadline = asyncio.timeout(self.timeout_secs if self.timeout_secs > 0 else None)
        try:
            prepared = backend.prepare_config(config, path)
            lv.config = prepared
            lv.labels = read_labels(prepared, model_path)
            self._check_instances(name, prepared)
            async with deadline:
                instances = await backend.load(
                    LoadContext(prepared, version, path, model_path, self.caller, self.cache_dir,
                                self.stream_caller, self.custom_metrics)
                )
                scheduler = self._scheduler(lv, prepared, model_path, instances)
                scheduler.start()
                await self._warm_up(name, version, prepared, path, scheduler)
        except TimeoutError as exc:
            lv.state = VersionState.UNAVAILABLE
            lv.reason = (
                f"load timed out: not loaded and warmed up within {self.timeout_secs:g} s "
                "(--model-load-timeout-secs); the load was abandoned"
                if deadline.expired() else f"{type(exc).__name__}: {exc}"
            )
        except (ConfigError, InferenceError) as exc:
            lv.state, lv.reason = VersionState.UNAVAILABLE, str(exc)
        except Exception as exc:  # user code (a Python model's initialize) can raise anything
            lv.state, lv.reason = VersionState.UNAVAILABLE, f"{type(exc).__name__}: {exc}"
        except BaseException as exc:  # SystemExit or KeyboardInterrupt a backend let through
            if must_propagate(exc):
                raise
            lv.state, lv.reason = VersionState.UNAVAILABLE, f"model '{name}' version {version}: load raised {exc!r}"
        else:
            lv.scheduler = scheduler
            log.info("loaded model '%s' version %d", name, version)
            return lv
        if scheduler is not None and deadline.expired():
            # its warm-up may still hang in a backend thread: close it in the background, never wait for it
            task = asyncio.get_running_loop().create_task(scheduler.close())
            self._abandoned.add(task)
            task.add_done_callback(self._abandoned.discard)
        elif scheduler is not None:
            await scheduler.close()
        log.error("failed to load model '%s' version %d: %s", name, version, lv.reason)
        return lv

    @staticmethod
    def _scheduler(
        lv: LoadedVersion, config: mc.ModelConfig, model_path: Path, instances: list[ModelInstance]
    ) -> Scheduler | SequenceScheduler:
        """The sequence batcher for a config with sequence_batching (a live sequence holds the version loaded),
        else the shared queue with optional dynamic batching."""
        if has_sequence_batching(config):
            settings = settings_from_config(config, model_path)
            return SequenceScheduler(
                lv.model, instances, settings, lv.stats,
                hold=lambda: Registry.acquire(lv), release=lambda: Registry.release(lv),
            )
        return Scheduler(lv.model, instances, BatchPolicy.from_config(config), lv.stats)

    def _check_instances(self, name: str, config: mc.ModelConfig) -> None:
        count = len(instance_slots(config))
        if self.max_instances > 0 and count > self.max_instances:
            raise ConfigError(
                f"model '{name}': instance_group asks for {count} instances, more than this runtime allows per "
                f"model ({self.max_instances}, --max-instances-per-model)"
            )

    async def _warm_up(self, name: str, version: int, config: mc.ModelConfig, path: Path, scheduler: Scheduler | SequenceScheduler) -> None:
        requests = warmup_requests(config, path)
        if isinstance(scheduler, SequenceScheduler):  # each sample is a sequence of one request
            requests = [
                dataclasses.replace(r, correlation_id=f"warmup-{i}", flags=FLAG_START | FLAG_END)
                for i, r in enumerate(requests)
            ]
        for request in requests:
            try:
                await scheduler.submit(request)
            except BaseException as exc:
                if must_propagate(exc):
                    raise
                message = exc.message if isinstance(exc, InferenceError) else f"{type(exc).__name__}: {exc}"
                raise WarmupError(f"warm-up request '{request.request_id}' failed: {message}") from None
        if requests:
            log.info("warmed up model '%s' version %d with %d request(s)", name, version, len(requests))
