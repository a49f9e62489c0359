"""Steady client load balanced across an Ensemble's ready endpoints, as a client-side load balancer would.

A refresher thread re-reads the headless Service's EndpointSlices; each worker thread sends requests round
robin over the addresses ready at that moment (one tritonclient gRPC client per worker and address). Every
outcome is recorded: the address, whether it was still ready when the request was sent, the version pair
the two steps reported, and any error. Nothing is retried, so every failure counts.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Self

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support.load import ThreadedLoad

GRPC_PORT = 8001


@dataclass(frozen=True, slots=True)
class Outcome:
    started: float
    finished: float
    endpoint: str
    versions: tuple[int, int] = (0, 0)  # (step a, step b)
    values_ok: bool = True  # each step's Y == X + the version it reported
    error: str = ""

    @property
    def latency(self) -> float:
        return self.finished - self.started


class BalancedLoad(ThreadedLoad[Outcome]):
    """`workers` threads calling `model` back to back over the ready endpoints until `stop()` or `deadline_s`."""

    def __init__(
        self,
        endpoints: Callable[[], list[str]],
        model: str,
        *,
        workers: int = 4,
        refresh_s: float = 0.25,
        deadline_s: float = 600.0,
    ) -> None:
        super().__init__(workers, deadline_s)
        self._read_endpoints = endpoints
        self.model = model
        self._refresh_s = refresh_s
        self._endpoints: list[str] = endpoints()
        self._resume = threading.Event()
        self._resume.set()
        self._in_flight = 0
        self._refresher = threading.Thread(target=self._refresh, daemon=True)

    def __enter__(self) -> Self:
        self._refresher.start()
        return super().__enter__()

    def stop(self) -> list[Outcome]:
        outcomes = super().stop()
        self._refresher.join(30)
        return outcomes

    def outcomes(self, since: float = 0.0) -> list[Outcome]:
        with self._changed:
            return [o for o in self._outcomes if o.started >= since]

    def endpoints(self) -> list[str]:
        with self._changed:
            return list(self._endpoints)

    def wait_for(self, what: str, match: Callable[[Outcome], bool], since: float, timeout: float) -> Outcome:
        """The first outcome started after `since` that matches, waiting with a deadline."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = next((o for o in self._outcomes if o.started >= since and match(o)), None)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    last = self._outcomes[-3:]
                    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}; last outcomes: {last}")
                self._changed.wait(min(left, 1.0))

    def wait_progress(self, since: float, count: int = 20, timeout: float = 30.0) -> None:
        """Wait until `count` requests started after `since` have finished (the load is still flowing)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while sum(1 for o in self._outcomes if o.started >= since) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"fewer than {count} requests finished within {timeout:.0f}s")
                self._changed.wait(min(left, 1.0))

    @contextmanager
    def paused(self, timeout: float = 30.0) -> Iterator[None]:
        """No request in flight inside the block. This process may then fork: the tests' process helpers
        fork with a preexec_fn, and gRPC's fork handlers abort the child if calls are in flight."""
        self._resume.clear()
        try:
            deadline = time.monotonic() + timeout
            with self._changed:
                while self._in_flight:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"{self._in_flight} request(s) still in flight after {timeout:.0f}s")
                    self._changed.wait(min(left, 1.0))
            yield
        finally:
            self._resume.set()

    # ------------------------------------------------------------------ threads

    def _refresh(self) -> None:
        while not self._stop.wait(self._refresh_s):
            try:
                current = self._read_endpoints()
            except Exception:  # the API server is busy: keep the last view, as a client library would
                continue
            with self._changed:
                self._endpoints = current

    def _work(self, worker: int) -> None:
        clients: dict[str, grpcclient.InferenceServerClient] = {}
        try:
            for i in itertools.count():
                if not self._running():
                    return
                with self._changed:
                    endpoints = list(self._endpoints) if self._resume.is_set() else []
                    self._in_flight += bool(endpoints)
                if not endpoints:  # paused, or no ready endpoint: a client would back off the same way
                    self._stop.wait(0.05)
                    continue
                address = endpoints[(worker + i) % len(endpoints)]
                try:
                    if address not in clients:
                        clients[address] = grpcclient.InferenceServerClient(f"{address}:{GRPC_PORT}")
                    self._record(self._call(clients[address], address, worker, i))
                finally:
                    with self._changed:
                        self._in_flight -= 1
                        self._changed.notify_all()
        finally:
            for client in clients.values():
                client.close()

    def _call(self, client: grpcclient.InferenceServerClient, address: str, worker: int, i: int) -> Outcome:
        x = np.array([[float((worker * 1_000 + i) % 10_000 + j) for j in range(4)]], np.float32)
        item = grpcclient.InferInput("X", list(x.shape), "FP32")
        item.set_data_from_numpy(x)
        started = time.monotonic()
        try:
            result = client.infer(self.model, [item], client_timeout=10.0)
        except InferenceServerException as exc:
            return Outcome(started, time.monotonic(), address, error=f"{exc.status()}: {exc.message()}")
        finished = time.monotonic()
        a, b = (int(result.as_numpy(f"{s}_version")[0, 0]) for s in ("a", "b"))
        ok = bool(np.array_equal(result.as_numpy("a_y"), x + a) and np.array_equal(result.as_numpy("b_y"), x + b))
        return Outcome(started, finished, address, (a, b), ok)


def p99(outcomes: Sequence[Outcome]) -> float | None:
    latencies = [o.latency for o in outcomes if not o.error]
    return float(np.percentile(latencies, 99)) if latencies else None


def summarize(outcomes: Sequence[Outcome], allowed: set[tuple[int, int]], steady_p99: float | None) -> dict[str, object]:
    """Requests, failures (with a few messages), responses from a version set outside `allowed` or with
    wrong values ("mixed"), the version sets seen, and p99 over the steady p99."""
    failed = [o for o in outcomes if o.error]
    mixed = [o for o in outcomes if not o.error and (o.versions not in allowed or not o.values_ok)]
    rollover_p99 = p99(outcomes)
    start = min((o.started for o in outcomes), default=0.0)
    windows: dict[str, list[float]] = {}
    for o in failed:
        kind = "refused" if "refused" in o.error else "not found" if "NOT_FOUND" in o.error else "other"
        at = o.started - start
        span = windows.setdefault(f"{o.endpoint} {kind}", [at, at, 0])
        span[0], span[1], span[2] = min(span[0], at), max(span[1], at), span[2] + 1
    return {
        "requests": len(outcomes),
        # per endpoint and kind of failure: [first, last] second into the window, and how many
        "failure_windows": {k: [round(v[0], 2), round(v[1], 2), int(v[2])] for k, v in sorted(windows.items())},
        "failed": len(failed),
        "failures": sorted({o.error[:160] for o in failed})[:5],
        "mixed": len(mixed),
        "version_sets": sorted({str(o.versions) for o in outcomes if not o.error}),
        "p99_s": rollover_p99,
        "p99_over_steady": (rollover_p99 / steady_p99) if rollover_p99 and steady_p99 else None,
    }
