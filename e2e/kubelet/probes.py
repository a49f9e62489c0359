"""Startup, liveness and readiness probes: the checks (httpGet, tcpSocket, grpc, exec) and their counters."""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .api import JSON

Exec = Callable[[Sequence[str], float], int]  # argv, timeout -> exit code


def resolve_port(port: int | str, container: JSON) -> int:
    """A probe/lifecycle port: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or port.isdigit():
        return int(port)
    for spec in container.get("ports") or []:
        if spec.get("name") == port:
            return int(spec["containerPort"])
    raise ValueError(f"container {container['name']} has no port named {port!r}")


def http_get(action: JSON, container: JSON, pod_ip: str, timeout: float) -> bool:
    host = action.get("host") or pod_ip
    port = resolve_port(action["port"], container)
    if action.get("scheme", "HTTP").upper() == "HTTPS":
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    headers = {h["name"]: h["value"] for h in action.get("httpHeaders") or []}
    try:
        conn.request("GET", action.get("path", "/"), headers={"User-Agent": "kube-probe/e2e", **headers})
        return 200 <= conn.getresponse().status < 400
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def tcp_socket(action: JSON, container: JSON, pod_ip: str, timeout: float) -> bool:
    try:
        with socket.create_connection(
            (action.get("host") or pod_ip, resolve_port(action["port"], container)), timeout=timeout
        ):
            return True
    except OSError:
        return False


def grpc_health(action: JSON, pod_ip: str, timeout: float) -> bool:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(f"{pod_ip}:{int(action['port'])}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = stub.Check(health_pb2.HealthCheckRequest(service=action.get("service", "")), timeout=timeout)
        except grpc.RpcError:
            return False
        return bool(response.status == health_pb2.HealthCheckResponse.SERVING)


def run_handler(handler: JSON, container: JSON, pod_ip: str, run_exec: Exec, timeout: float) -> bool:
    """One probe check or lifecycle handler (exec, httpGet, tcpSocket, grpc, sleep); True on success."""
    if "exec" in handler:
        return run_exec(handler["exec"]["command"], timeout) == 0
    if "httpGet" in handler:
        return http_get(handler["httpGet"], container, pod_ip, timeout)
    if "tcpSocket" in handler:
        return tcp_socket(handler["tcpSocket"], container, pod_ip, timeout)
    if "grpc" in handler:
        return grpc_health(handler["grpc"], pod_ip, timeout)
    if "sleep" in handler:
        time.sleep(min(timeout, float(handler["sleep"]["seconds"])))
        return True
    raise ValueError(f"unsupported handler {sorted(handler)}")


@dataclass
class ProbeState:
    """The counters of one probe of one container run. `result` is the probe's verdict so far."""

    spec: JSON
    started_at: float  # monotonic time the container started
    result: bool
    next_at: float = 0.0
    successes: int = 0
    failures: int = 0

    def __post_init__(self) -> None:
        self.next_at = self.started_at + float(self.spec.get("initialDelaySeconds", 0))

    @property
    def period(self) -> float:
        return float(self.spec.get("periodSeconds", 10))

    @property
    def timeout(self) -> float:
        return float(self.spec.get("timeoutSeconds", 1))

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def record(self, ok: bool, now: float) -> bool:
        """Count one check; returns the (possibly flipped) verdict."""
        self.next_at = now + self.period
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if self.successes >= int(self.spec.get("successThreshold", 1)):
                self.result = True
        else:
            self.successes, self.failures = 0, self.failures + 1
            if self.failures >= int(self.spec.get("failureThreshold", 3)):
                self.result = False
        return self.result
