"""One worker per object: marks in, reconciles out.

Events (a spec change, a Model change, a watched Deployment or Pod changing) only *mark* an object; its worker
(a kopf daemon, one per Ensemble and one per Model, see handlers.py) wakes up and reconciles it. So there is
exactly one reconcile of an object at a time, marks that arrive meanwhile fold into one more reconcile, and no
handler reconciles anything inline.

Between events a worker wakes up only on its own clock:
- every `status_interval` for the runtime pods' reports (served versions, storage, load failures: the
  runtime changes them without any Kubernetes event). It reads nothing from the API: the watches hold the
  state, the client remembers what it applied, and an unchanged status is not written;
- every `resync_interval` (and first after start) for a full reconcile that reads the owned objects from the
  API again, the safety net for changes no watch reports (an owned Service deleted by hand).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .found import FoundVersions
from .indexes import IndexView, Key, observed, plain, users
from .reconcile import Reconciler, model_names
from .render.common import Manifest
from .status import versions_found

logger = logging.getLogger(__name__)

RETRY_FIRST_S = 1.0  # after a failed reconcile, wait this long (doubling up to RETRY_MAX_S), or for a mark
RETRY_MAX_S = 60.0
RECONCILE_THREADS = 32  # reconciles in flight at once; mostly waiting on the API server and the pods


def in_threads(threads: int = RECONCILE_THREADS) -> Callable[..., Awaitable[Any]]:
    """Run blocking calls in a pool of their own: a reconcile waiting on its pods' answers never holds up
    another's (asyncio's default pool has a handful of threads on a small machine)."""
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="reconcile")

    async def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(fn, *args, **kwargs))

    return run


@dataclass
class Marks:
    """Objects that want a reconcile: one flag per key (touched from the event loop only)."""

    _flags: dict[Key, asyncio.Event] = field(default_factory=dict)

    def mark(self, key: Key) -> None:
        self._flags.setdefault(key, asyncio.Event()).set()

    def mark_existing(self, key: Key) -> None:
        """Mark `key` only while it has a worker (or a pending mark): an owned object's event after its
        Ensemble's worker ended (the garbage collector's deletions) leaves nothing behind. Before a worker
        starts nothing is lost: its first reconcile reads everything."""
        flag = self._flags.get(key)
        if flag is not None:
            flag.set()

    def is_marked(self, key: Key) -> bool:
        flag = self._flags.get(key)
        return flag is not None and flag.is_set()

    async def wait(self, key: Key, timeout: float, stop: asyncio.Future[Any]) -> bool:
        """Until `key` is marked (True; the mark is taken), `timeout` passes or `stop` is done (False)."""
        flag = self._flags.setdefault(key, asyncio.Event())
        if not flag.is_set() and timeout > 0 and not stop.done():
            waiter = asyncio.ensure_future(flag.wait())
            try:
                await asyncio.wait([waiter, stop], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
        marked = flag.is_set()
        flag.clear()
        return marked

    def drop(self, key: Key) -> None:
        self._flags.pop(key, None)


@dataclass
class Workers:
    reconciler: Reconciler
    status_interval: float
    resync_interval: float
    debounce: float = 0.2  # after a mark, gather the burst that came with it (a rollout's pod events)
    ensembles: Marks = field(default_factory=Marks)
    models: Marks = field(default_factory=Marks)
    found: FoundVersions = field(default_factory=FoundVersions)
    run: Callable[..., Awaitable[Any]] = field(default_factory=in_threads)  # where the blocking calls run

    async def ensemble(
        self,
        body: Mapping[str, Any],
        stop: asyncio.Future[Any],
        model_index: IndexView,
        deployment_index: IndexView,
        pod_index: IndexView,
    ) -> None:
        """Reconcile the Ensemble `body` (kopf's live view of it) whenever it is marked, and on its clocks,
        until `stop`."""
        meta = body["metadata"]
        key: Key = (meta["namespace"], meta["name"])
        loop = asyncio.get_running_loop()
        last_full = float("-inf")
        retry = 0.0
        written: tuple[str | None, Manifest] | None = None  # (the resourceVersion it replaced, the object)
        while not stop.done():
            fresh = loop.time() - last_full >= self.resync_interval
            current = plain(body)
            if written is not None and current["metadata"].get("resourceVersion") == written[0]:
                current = written[1]  # our own status write, which the watch has not brought back yet
            inputs = observed(current, model_index, deployment_index, pod_index)
            wait = self.status_interval
            try:
                outcome = await self.run(self.reconciler.ensemble, current, inputs, fresh=fresh)
            except Exception:
                retry = min(RETRY_MAX_S, retry * 2 or RETRY_FIRST_S)
                logger.exception("Ensemble %s/%s: reconcile failed; again in %.0f s", *key, retry)
                wait = retry
            else:
                retry = 0.0
                if fresh:
                    last_full = loop.time()
                if outcome.written is not None:
                    written = (current["metadata"].get("resourceVersion"), outcome.written)
                for model in self.found.record(*key, versions_found(outcome.pods, model_names(current))):
                    self.models.mark((key[0], model))
                if outcome.settling:  # run again once the Models have settled, with the whole batch
                    wait = min(wait, self.reconciler.settle.remaining(key[0], outcome.settling) + 0.05)
            wait = min(wait, max(0.0, last_full + self.resync_interval - loop.time()))
            if await self.ensembles.wait(key, wait, stop) and self.debounce > 0:
                await asyncio.wait([stop], timeout=self.debounce)
        self.ensembles.drop(key)

    def ensemble_gone(self, namespace: str, name: str, used: list[str]) -> None:
        """An Ensemble was deleted: its Models lose a user (and what its pods found)."""
        for model in set(used) | set(self.found.drop(namespace, name)):
            self.models.mark((namespace, model))

    async def model(self, body: Mapping[str, Any], stop: asyncio.Future[Any], user_index: IndexView) -> None:
        """Write the Model's status whenever it is marked (a user more or less, versions found), until `stop`.
        Once the Model is being deleted its deletion handler writes the status instead (kopf stops this)."""
        meta = body["metadata"]
        key: Key = (meta["namespace"], meta["name"])
        retry = 0.0
        written: tuple[str | None, Manifest] | None = None
        while not stop.done():
            current = plain(body)
            if written is not None and current["metadata"].get("resourceVersion") == written[0]:
                current = written[1]
            before = (current.get("status") or {}).get("versionsFound")
            wait = self.resync_interval
            try:
                users_now = users(user_index, *key)
                new = await self.run(self.reconciler.model_status, current, users_now, self.found.union(*key))
            except Exception:
                retry = min(RETRY_MAX_S, retry * 2 or RETRY_FIRST_S)
                logger.exception("Model %s/%s: status refresh failed; again in %.0f s", *key, retry)
                wait = retry
            else:
                retry = 0.0
                if new is not None:
                    written = (current["metadata"].get("resourceVersion"), new)
                    if (new.get("status") or {}).get("versionsFound") != before:
                        for user in users_now:  # their pinned versions are checked against it
                            self.ensembles.mark((key[0], user))
            await self.models.wait(key, wait, stop)
        self.models.drop(key)


def stop_future(stopped: Any) -> asyncio.Future[Any]:
    """A future done when kopf's `stopped` flag (of an async daemon) is set."""

    async def until() -> None:
        await stopped.wait()

    return asyncio.ensure_future(until())
