"""Reading an HTTP request body within a size limit: refused by its Content-Length before any byte is read,
and inflated (gzip, deflate) in bounded steps, refused as soon as the inflated size passes the limit.

aiohttp would inflate a compressed body itself, whole, before the handler sees it (a 1 MiB gzip bomb becomes
1 GiB in memory); the app turns that off (`auto_decompress=False`, see http_server) and reads through here.
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass

from aiohttp import web

from ensemble_runtime.errors import quote_name
from ensemble_runtime.protocol import status_codes

HTTP_UNSUPPORTED_MEDIA_TYPE = 415
INFLATE_STEP = 1024 * 1024  # inflated bytes per step; the loop gets a turn between steps
_ENCODINGS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


@dataclass(frozen=True, slots=True)
class Limit:
    """How many bytes a body may have; `what` names such a body in the 413's message, `hint` says what to do."""

    size: int
    what: str = "request body"
    hint: str = ""


class BodyRefused(Exception):
    """A body refused before or while reading it; the connection is closed after the answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def too_large(limit: Limit) -> BodyRefused:
    hint = f"; {limit.hint}" if limit.hint else ""
    return BodyRefused(status_codes.HTTP_PAYLOAD_TOO_LARGE, f"{limit.what} exceeds the limit of {limit.size} bytes{hint}")


def check_declared_length(request: web.Request, limit: Limit) -> None:
    """Refuse by the Content-Length header alone, before reading the body."""
    declared = request.content_length
    if declared is not None and declared > limit.size:
        raise too_large(limit)


async def read_body(request: web.Request, limit: Limit) -> bytearray:
    """The body, inflated if it says it is compressed; at most `limit.size` bytes of it, else BodyRefused."""
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity") and encoding not in _ENCODINGS:
        raise BodyRefused(
            HTTP_UNSUPPORTED_MEDIA_TYPE,
            f"unsupported Content-Encoding {quote_name(encoding)} (supported: gzip, deflate, identity)",
        )
    check_declared_length(request, limit)
    body = bytearray()
    inflater = _Inflater(encoding, limit) if encoding in _ENCODINGS else None
    while True:
        chunk = await request.content.readany()
        if not chunk:
            break
        if inflater is None:
            if len(body) + len(chunk) > limit.size:
                raise too_large(limit)
            body += chunk
        else:
            await inflater.feed(chunk, body)
    if inflater is not None:
        inflater.finish()
    return body


class _Inflater:
    """zlib in steps of at most INFLATE_STEP output bytes, counting what it has produced against the limit."""

    def __init__(self, encoding: str, limit: Limit) -> None:
        self._encoding = encoding
        self._limit = limit
        self._zlib = zlib.decompressobj(_ENCODINGS[encoding])
        self._started = False

    async def feed(self, chunk: bytes, body: bytearray) -> None:
        if not self._started and self._encoding == "deflate" and chunk[0] & 0x0F != 8:
            self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate, as some clients send it
        self._started = True
        data = chunk
        while data:
            if self._zlib.eof:
                raise self._corrupt("data after the end of the compressed stream")
            try:
                out = self._zlib.decompress(data, INFLATE_STEP)
            except zlib.error as exc:
                raise self._corrupt(str(exc)) from None
            if len(body) + len(out) > self._limit.size:
                raise too_large(self._limit)
            body += out
            data = self._zlib.unconsumed_tail
            if data:
                await asyncio.sleep(0)  # let other requests (and probes) run between steps

    def finish(self) -> None:
        if self._started and not self._zlib.eof:
            raise self._corrupt("the compressed stream is truncated")

    def _corrupt(self, why: str) -> BodyRefused:
        return BodyRefused(status_codes.HTTP_BAD_REQUEST, f"request body is not valid {self._encoding} data: {why}")
