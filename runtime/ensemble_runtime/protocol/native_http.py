"""The native HTTP front end (`--http-frontend=native`): the Rust core (ensemble_runtime.protocol._native) serves
the HTTP port. It answers the KServe v2 infer endpoint itself: restriction and body limits checked there, the
body read there and handed over in batches (one event-loop wake-up per batch, `add_reader` on the core's
descriptor). A body of the common shapes (every input's data binary, or JSON `data` of numbers or booleans; no
shared memory) has its JSON header read by the core too (`HttpCall.binary`); any other body is decoded here.
Answered here through the data plane (from the model instance's thread, without a task, where the data plane can),
the answer written by the core from the response's arrays (binary data, or JSON `data` in the header) where they
are plain (`HttpCall.reply_response`), else encoded here. Everything else (every other
route, compressed requests) it forwards to the aiohttp app, which listens on a Unix socket in a private
directory: one set of routes, statuses and messages for both paths."""

from __future__ import annotations

import asyncio
import functools
import logging
import shutil
import tempfile
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from aiohttp import web

from ensemble_runtime.dataplane import HTTP_ENDPOINT, DataPlane
from ensemble_runtime.dtypes import tensor_from_raw
from ensemble_runtime.errors import InferenceError, bounded
from ensemble_runtime.inference import InferRequest, InferResponse
from ensemble_runtime.protocol import http_codec as codec
from ensemble_runtime.protocol import status_codes
from ensemble_runtime.protocol._native import BinaryInfer, HttpCall, HttpCore
from ensemble_runtime.protocol.http_body import Limit, too_large
from ensemble_runtime.protocol.http_server import body_limits, start_http_unix
from ensemble_runtime.protocol.offload import INLINE_BYTES, response_size, sized
from ensemble_runtime.protocol.on_loop import LoopDriver, drive
from ensemble_runtime.restrictions import Category, Restrictions
from ensemble_runtime.settings import SEND_TIMEOUT_SECS
from ensemble_runtime.shared_memory import SharedMemoryRegistry, sends_to_shared_memory

log = logging.getLogger(__name__)
HTTP_UNAVAILABLE = 503


def _limit(limit: Limit) -> tuple[int, bytes]:
    return limit.size, codec.error_body(too_large(limit).message)


def _restriction(restrictions: Restrictions | None) -> tuple[str, str, bytes] | None:
    restriction = restrictions.get(Category.INFERENCE) if restrictions is not None else None
    if restriction is None:
        return None
    return restriction.header, restriction.value, codec.error_body(restriction.refusal("API"))


def _fail(call: HttpCall, status: int, message: str) -> None:
    call.reply(status, codec.JSON_CONTENT, None, [codec.error_body(bounded(message))])


def begin_http_infer(call: HttpCall, dataplane: DataPlane) -> Coroutine[Any, Any, None] | None:
    """An infer call, begun on the loop. A small body is decoded here; where the data plane takes it without a
    task (`DataPlane.infer_then`) it is run, encoded and answered on the model instance's thread. None: it is
    taken (or refused, answered already). Otherwise the coroutine that answers it, to run as a task."""
    if call.size > INLINE_BYTES:  # decoded off the loop by answer_http_infer
        return answer_http_infer(call, dataplane)
    try:
        decoded = decode_call(call, dataplane.shared_memory)
        request = decoded.request
        outputs = request.output_parameters
        if not (outputs and sends_to_shared_memory(outputs)) and dataplane.infer_then(
            request, decoded.declared, functools.partial(_answer_then, call, decoded), HTTP_ENDPOINT
        ):
            return None
    except Exception as exc:
        _fail_infer(call, exc)
        return None
    return answer_http_infer(call, dataplane, decoded)


def decode_call(call: HttpCall, shm: SharedMemoryRegistry | None) -> codec.DecodedInfer:
    """The call's request: from what the core read (`call.binary`) when it could, else from the body."""
    binary = call.binary
    if binary is None:
        return codec.decode_infer_request(call.body, call.header_length, call.model, call.version, shm)
    return decode_binary(binary, call.model, call.version)


def decode_binary(binary: BinaryInfer, model: str, version: str) -> codec.DecodedInfer:
    """What `codec.decode_infer_request` makes of a body the core read: the core made its structural checks,
    the tensors are checked against their bytes here, in the same order, with the same messages."""
    inputs = binary.arrays
    declared = binary.declared
    if inputs is None or declared is None:  # some tensor's checks against its bytes are Python's to make
        inputs, declared = {}, {}
        for name, wire, shape, data in binary.inputs:
            inputs[name] = tensor_from_raw(name, wire, shape, data)
            declared[name] = wire
    outputs = binary.outputs
    request = InferRequest(model, version, inputs, list(outputs), binary.id, binary.parameters, outputs)
    return codec.DecodedInfer(request, declared, binary.binary_default)


def _answer_then(call: HttpCall, decoded: codec.DecodedInfer, outcome: InferResponse | Exception) -> None:
    """Where `infer_then` hands an infer call's outcome, on the model instance's thread."""
    if isinstance(outcome, Exception):
        _fail_infer(call, outcome)
        return
    try:
        as_json = codec.json_outputs(outcome, decoded)
        if as_json is not None and call.reply_response(outcome, as_json):
            return  # the core read the arrays and wrote the JSON header, as encode_infer_parts does
        outputs = codec.binary_outputs(outcome, decoded) if as_json == () else None  # () : all binary
        if outputs is not None and call.reply_binary(
            outcome.model_name, outcome.model_version, outcome.id, outcome.parameters, outputs
        ):
            return  # the core wrote the JSON header, as encode_infer_parts does, without the GIL
        head, chunks = codec.encode_infer_parts(outcome, decoded)
    except Exception as exc:
        _fail_infer(call, exc)
        return
    _reply(call, head, chunks)


async def answer_http_infer(
    call: HttpCall, dataplane: DataPlane, decoded: codec.DecodedInfer | None = None
) -> None:
    """What the aiohttp app's infer route does once it has the body: decode (in a thread when large; unless
    `decoded` already), run, encode (the JSON here, the binary outputs joined by the core); errors as its
    middleware answers them."""
    shm = dataplane.shared_memory
    try:
        if decoded is None:
            decoded = await sized(call.size, decode_call, call, shm)
        response = await dataplane.infer(decoded.request, decoded.declared, HTTP_ENDPOINT)
        size = response_size(response)
        as_json = codec.json_outputs(response, decoded)
        if as_json is not None and await sized(size, call.reply_response, response, as_json):
            return  # written by the core (JSON data too), off the loop when large
        head, chunks = await sized(size, codec.encode_infer_parts, response, decoded, shm)
    except asyncio.CancelledError:
        _fail(call, HTTP_UNAVAILABLE, "the server is stopping")
        raise
    except Exception as exc:
        _fail_infer(call, exc)
        return
    _reply(call, head, chunks)


def _reply(call: HttpCall, head: bytes, chunks: list[codec.Chunk]) -> None:
    if not chunks:
        call.reply(status_codes.HTTP_OK, codec.JSON_CONTENT, None, [head])
    else:  # the core joins header and tensors with the GIL released: the arrays are not copied here
        call.reply(status_codes.HTTP_OK, codec.BINARY_CONTENT, len(head), [head, *chunks])


def _fail_infer(call: HttpCall, exc: Exception) -> None:
    """An infer call's error as the aiohttp app's middleware answers it."""
    if isinstance(exc, InferenceError):
        _fail(call, status_codes.http_status(exc.code), exc.message)
        return
    log.exception("unexpected error in HTTP handler for POST /v2/models/%s/infer", call.model, exc_info=exc)
    _fail(call, status_codes.HTTP_INTERNAL, f"internal error: {type(exc).__name__}: {exc}")


class NativeHttpServer:
    """`app`: the aiohttp app of every route (build_http_app), for what the core forwards. `serves_infer=False`:
    the core forwards every request to `app` (the metrics port: hyper's header timeout, the body pace and the
    connection share in front of an app that has none of them)."""

    def __init__(
        self, dataplane: DataPlane, app: web.Application, max_body_bytes: int, max_json_bytes: int,
        restrictions: Restrictions | None = None, threads: int = 1, body_timeout_secs: float = 30.0,
        max_connections: int = 1024, serves_infer: bool = True, send_timeout_secs: float = SEND_TIMEOUT_SECS,
    ) -> None:
        self._dp = dataplane
        self._app = app
        self._limits = body_limits(max_body_bytes, max_json_bytes)
        self._restriction = _restriction(restrictions)
        self._threads = threads
        self._body_timeout_secs = body_timeout_secs
        self._max_connections = max_connections
        self._serves_infer = serves_infer
        self._send_timeout_secs = send_timeout_secs
        self._core: HttpCore | None = None
        self._runner: web.AppRunner | None = None
        self._socket_dir: Path | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._driver: LoopDriver | None = None  # threads 0: the loop's thread drives the core

    async def start(self, address: str, port: int) -> int:
        """Serve on `address:port` (0: any free port); returns the port."""
        self._socket_dir = Path(tempfile.mkdtemp(prefix="ensemble-http-"))  # mode 0700: this user only
        upstream = self._socket_dir / "app.sock"
        self._runner = await start_http_unix(self._app, str(upstream))
        body, json = self._limits
        self._core = HttpCore(_limit(body), _limit(json), self._restriction, str(upstream), self._threads,
                              self._body_timeout_secs, self._max_connections, self._serves_infer,
                              self._send_timeout_secs)
        bound = self._core.start(address, port)
        log.info("HTTP: the native core serves %s:%d; routes it forwards go to %s", address, bound, upstream)
        loop = asyncio.get_running_loop()
        if self._serves_infer:
            self._loop = loop
            self._loop.add_reader(self._core.fileno(), self._drain)
        self._driver = drive(loop, self._core, self._drain if self._serves_infer else None)
        return bound

    def _drain(self) -> None:
        """One wake-up (or, for a core the loop drives, calls its turn read): every infer call waiting, one task
        each (none for a call the data plane takes without)."""
        assert self._loop is not None and self._core is not None
        for call in self._core.take():
            work = begin_http_infer(call, self._dp)
            if work is None:
                continue
            task = self._loop.create_task(work)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def stop(self, grace: float) -> None:
        """Stop taking requests; those in flight are answered for up to `grace` seconds."""
        if self._driver is not None:
            await self._driver.stop(grace)
            self._driver = None
        elif self._core is not None:
            await asyncio.to_thread(self._core.stop, grace)
        if self._core is not None and self._loop is not None:
            self._loop.remove_reader(self._core.fileno())
            self._loop = None
        for task in list(self._tasks):
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
