"""Probe a server's liveness (HTTP GET /v2/health/live and gRPC ServerLive) from a thread and keep the worst
latency seen, to check that nothing a client sends stalls the event loop; and read a process's memory peak."""

from __future__ import annotations

import http.client
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

PROBE_TIMEOUT_S = 60.0  # a stalled loop shows as a long probe, not as a failed one


class LivenessProbe:
    """While entered, probes both transports in turn (paced, one at a time) and records the worst latency."""

    def __init__(self, http_url: str, grpc_url: str, pace_s: float = 0.01) -> None:
        self._http_url = http_url
        self._grpc_url = grpc_url
        self._pace_s = pace_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="liveness-probe", daemon=True)
        self.worst_http_s = 0.0
        self.worst_grpc_s = 0.0
        self.probes = 0
        self.failures: list[str] = []

    @property
    def worst_s(self) -> float:
        return max(self.worst_http_s, self.worst_grpc_s)

    def _run(self) -> None:
        host, port = self._http_url.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=PROBE_TIMEOUT_S)
        with grpc.insecure_channel(self._grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    conn.request("GET", "/v2/health/live")
                    response = conn.getresponse()
                    response.read()
                    if response.status != 200:
                        self.failures.append(f"HTTP live answered {response.status}")
                except (OSError, http.client.HTTPException) as exc:
                    self.failures.append(f"HTTP live: {exc!r}")
                    conn.close()
                self.worst_http_s = max(self.worst_http_s, time.perf_counter() - started)
                started = time.perf_counter()
                try:
                    if not stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=PROBE_TIMEOUT_S).live:
                        self.failures.append("gRPC ServerLive answered live=false")
                except grpc.RpcError as exc:
                    self.failures.append(f"gRPC ServerLive: {exc!r}")
                self.worst_grpc_s = max(self.worst_grpc_s, time.perf_counter() - started)
                self.probes += 1
                self._stop.wait(self._pace_s)
        conn.close()

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(PROBE_TIMEOUT_S * 2 + 5)

    def report(self) -> str:
        return (f"worst liveness latency: HTTP {self.worst_http_s * 1000:.1f} ms, gRPC {self.worst_grpc_s * 1000:.1f} ms "
                f"over {self.probes} probes")


def memory_kib(pid: int, field: str = "VmHWM") -> int:
    """A memory figure of a process from /proc (VmHWM: peak resident set; VmRSS: now), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise KeyError(field)
