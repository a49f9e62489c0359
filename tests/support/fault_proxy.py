"""A reverse proxy on loopback that injects HTTP faults on demand, in front of a real server (MinIO).

    with FaultProxy(minio.endpoint_url) as proxy:
        proxy.inject("slowdown", count=3)                          # 503 SlowDown for the next 3 requests
        proxy.inject("truncate", count=1, path_contains="/1/")     # half the body, consistent Content-Length
        client = boto3.client("s3", endpoint_url=proxy.endpoint_url, ...)

Faults (each applies to the next `count` matching requests, then the proxy forwards faithfully again):
- slowdown: 503 with S3's `SlowDown` XML error body (throttling: clients back off and retry);
- drop: the connection is closed without any response;
- truncate: the first half of the upstream body, with a Content-Length that matches it, so only a check
  against the listing's size catches it (end-to-end checksum headers are removed);
- corrupt: the body with some bytes flipped, same length (only an MD5/ETag check catches it);
- cut: the full Content-Length is announced, half the body sent, then the connection is closed.

The Host header is forwarded unchanged, so SigV4 signatures made for the proxy's address stay valid.
The server runs on its own event loop in a thread, so synchronous tests and boto3 threads can use it.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, Self

from aiohttp import ClientSession, ClientTimeout, web

Fault = Literal["slowdown", "drop", "truncate", "corrupt", "cut"]

_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection", "content-length"}
)
_SLOWDOWN_XML = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
    "<Resource>{path}</Resource><RequestId>fault-proxy</RequestId></Error>"
)


@dataclass(slots=True)
class _Rule:
    fault: Fault
    remaining: int
    method: str | None
    path_contains: str

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and self.path_contains in path


class FaultProxy:
    """Forwards every request to `upstream`; injects the faults asked for with `inject`."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []
        self._delivered: Counter[str] = Counter()
        self._requests: list[tuple[str, str, int]] = []  # method, path, status (0: dropped)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None
        self.port = 0

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    def inject(self, fault: Fault, count: int = 1, *, method: str | None = "GET", path_contains: str = "") -> None:
        """Apply `fault` to the next `count` requests with this method (None: any) whose path contains
        `path_contains`."""
        with self._lock:
            self._rules.append(_Rule(fault, count, method, path_contains))

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def delivered(self, fault: Fault) -> int:
        """How many times `fault` has been injected so far."""
        with self._lock:
            return self._delivered[fault]

    def pending(self) -> int:
        """Injections asked for and not delivered yet."""
        with self._lock:
            return sum(rule.remaining for rule in self._rules)

    def requests(self) -> list[tuple[str, str, int]]:
        with self._lock:
            return list(self._requests)

    def _take(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for rule in self._rules:
                if rule.remaining > 0 and rule.matches(method, path):
                    rule.remaining -= 1
                    self._delivered[rule.fault] += 1
                    return rule.fault
            return None

    def _record(self, method: str, path: str, status: int) -> None:
        with self._lock:
            self._requests.append((method, path, status))

    async def _start(self) -> None:
        self._session = ClientSession(auto_decompress=False, timeout=ClientTimeout(total=60))
        app = web.Application(client_max_size=1024**3)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])  # chosen by the OS

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        fault = self._take(request.method, request.path)
        if fault == "slowdown":
            self._record(request.method, request.path, 503)
            return web.Response(
                status=503,
                text=_SLOWDOWN_XML.format(path=request.path),
                content_type="application/xml",
                headers={"Retry-After": "0"},
            )
        if fault == "drop":
            self._record(request.method, request.path, 0)
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError  # nothing more to send on a connection that is gone
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        async with self._session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=body,
            allow_redirects=False,
            skip_auto_headers=("Content-Type", "Accept-Encoding", "Accept", "User-Agent"),
        ) as upstream:
            payload = await upstream.read()
            out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP}
            status = upstream.status
        self._record(request.method, request.path, status)
        if fault in {"truncate", "corrupt", "cut"} and payload:
            out_headers = {k: v for k, v in out_headers.items() if not k.lower().startswith("x-amz-checksum")}
            if fault == "truncate":
                payload = payload[: len(payload) // 2]
            elif fault == "corrupt":
                payload = bytes(b ^ 0xFF if i % 97 == 0 else b for i, b in enumerate(payload))
            else:
                return await self._cut(request, status, out_headers, payload)
        return web.Response(status=status, headers=out_headers, body=payload)

    async def _cut(
        self, request: web.Request, status: int, headers: dict[str, str], payload: bytes
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=status, headers=headers)
        response.content_length = len(payload)
        await response.prepare(request)
        await response.write(payload[: len(payload) // 2])
        if request.transport is not None:
            request.transport.abort()
        return response
