"""ModelStreamInfer through the native core without a task per request, where the data plane takes one
(`stream_then.stream_takes`: a decoupled model whose instances run on their own threads, through `stream_then`; a
model or ensemble that is not decoupled, through `DataPlane.infer_then` as ModelInfer's requests, or `infer` in a
task where that does not take it).

Each response is encoded and offered to the core on the thread the model sent it from (the core's `send` may be
called from any thread), and the request's last message tells the core it is answered there too: the event loop
takes the request and is not woken again for it. Where the core's window is full (the client is not reading),
that message and every one after it wait in the stream's backlog, which a task on the loop offers as the client
reads (`DirectSend`), so a request's messages keep their order and a slow client still holds the model's
responses back as it does on the task path. What a request gets is what `StreamSession._answer` gives it: the
same messages, errors and final flags.

The stream's `Gate` counts these requests with the session's tasks: one leaves it from the thread that sent its
last message, which wakes the loop only where the session waits for room, or for the stream's last request."""

from __future__ import annotations

import asyncio
import collections
import functools
import threading
from collections.abc import Callable

from ensemble_runtime.backends.handoff import on_loop
from ensemble_runtime.dataplane import DataPlane
from ensemble_runtime.errors import InferenceError, internal
from ensemble_runtime.inference import InferRequest, InferResponse
from ensemble_runtime.protocol._native import InferRequestView, StreamCall
from ensemble_runtime.protocol.grpc_stream import StreamSession
from ensemble_runtime.protocol.native_calls import ended_by_status
from ensemble_runtime.protocol.native_stream import FULL, SENT, Inbound, NativeCodec, Outlet, StreamMessage
from ensemble_runtime.protocol.offload import INLINE_BYTES, response_size, sized
from ensemble_runtime.protocol.stream_gate import Gate
from ensemble_runtime.responses import StreamResponse
from ensemble_runtime.shared_memory import ShmRef, output_refs
from ensemble_runtime.stream_then import stream_takes, stream_then

# A message waiting in the backlog: the message (or how to make it, on the loop, where it is large), its size, and
# what to call once it was offered.
_Waiting = tuple[StreamMessage | Callable[[], StreamMessage] | None, int, Callable[[], None] | None]


class DirectSend:
    """One stream's way out for messages sent from any thread (see the module): `send` offers a message to the core
    at once, or queues it behind those already waiting; a task on the loop offers those as the window opens."""

    def __init__(self, offer: Callable[[StreamMessage], int], outlet: Outlet, gate: Gate,
                 loop: asyncio.AbstractEventLoop) -> None:
        self._offer = offer
        self._outlet = outlet
        self._gate = gate
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._lock = threading.Lock()
        self._backlog: collections.deque[_Waiting] = collections.deque()
        self._stopped = False
        self._drainer: asyncio.Task[None] | None = None

    def send(self, make: Callable[[], StreamMessage] | None, size: int, after: Callable[[], None] | None) -> None:
        """Any thread: the message `make` makes (None: no message, only `after`), in the order this request sends
        them; `after` is called once it was offered. A large message made on the loop is made in a worker thread."""
        message: StreamMessage | Callable[[], StreamMessage] | None = make
        if make is not None and (size <= INLINE_BYTES or threading.get_ident() != self._loop_thread):
            message = make()
        with self._lock:
            if self._stopped:
                return
            if self._backlog or callable(message):
                self._wait(message, size, after)
                return
            offer = SENT if message is None else self._offer(message)
            if offer == FULL:
                self._wait(message, size, after)
                return
            if offer != SENT:  # the stream ended: the client went away
                self._stop()
        if offer != SENT:
            self._gate.give_up()
        elif after is not None:
            after()

    def on_loop(self, fn: Callable[[], None]) -> None:
        """Any thread: `fn()` on the loop."""
        on_loop(self._loop, self._loop_thread, fn)

    def stop(self) -> None:
        """On the loop: nothing more goes out (the stream is ending)."""
        with self._lock:
            self._stop()
        if self._drainer is not None:
            self._drainer.cancel()

    def _stop(self) -> None:
        self._stopped = True
        self._backlog.clear()

    def _wait(self, message: StreamMessage | Callable[[], StreamMessage] | None, size: int,
              after: Callable[[], None] | None) -> None:
        """Under the lock: queued behind the rest; the first one starts the loop's task."""
        self._backlog.append((message, size, after))
        if len(self._backlog) == 1:
            on_loop(self._loop, self._loop_thread, self._start_draining)

    def _start_draining(self) -> None:
        if not self._stopped:
            self._drainer = self._loop.create_task(self._drain())

    async def _drain(self) -> None:
        """Offers the backlog in order, waiting while the window is full. A message stays first in the backlog
        until it was offered, so nothing sent meanwhile passes it."""
        while True:
            with self._lock:
                if self._stopped or not self._backlog:
                    return
                message, size, after = self._backlog[0]
            if callable(message):
                message = await sized(size, message)
            if message is not None and not await self._outlet.send(message):
                with self._lock:
                    self._stop()
                self._gate.give_up()
                return
            with self._lock:
                if self._stopped:
                    return
                self._backlog.popleft()
                last = not self._backlog
            if after is not None:
                after()
            if last:
                return


class DirectStreams:
    """The requests of one ModelStreamInfer call that the data plane takes without a task (`take`)."""

    def __init__(self, dp: DataPlane, codec: NativeCodec, stream: StreamCall, outlet: Outlet) -> None:
        self._dp = dp
        self.codec = codec
        self.shm = dp.shared_memory
        self._stream = stream
        self._outlet = outlet
        self._out: DirectSend | None = None
        self._taken: dict[int, _Direct] = {}  # by id(), until each has ended (any thread: under `_lock`)
        self._lock = threading.Lock()

    def take(self, request: InferRequestView, gate: Gate) -> bool:
        """On the loop: whether this answers `request` (nothing was done or taken from it otherwise). Once taken,
        it is answered here whatever happens: its responses, or its error; `gate` is left as it ends."""
        if request.size > INLINE_BYTES:  # decoded inline here: a large one is decoded on a worker thread there
            return False
        taken = stream_takes(self._dp, request.model_name, request.model_version, request.parameters)
        if taken is None:
            return False
        lv, decoupled = taken
        if self._out is None:
            loop = asyncio.get_running_loop()
            self._out = DirectSend(self._stream.send, self._outlet, gate, loop)
        direct = _Direct(self, request, gate, self._out)
        with self._lock:
            self._taken[id(direct)] = direct
        codec, shm = self.codec, self.shm
        try:
            empty_final = codec.take_empty_final(request)
            decoded, declared = codec.decode(request, shm)
            direct.started(empty_final, output_refs(decoded.output_parameters))
            if decoupled:
                direct.cancel = stream_then(self._dp, lv, decoded, declared, direct.emit)
            elif not self._dp.infer_then(decoded, declared, direct.answer):
                task = asyncio.get_running_loop().create_task(self._infer(direct, decoded, declared))
                direct.cancel = functools.partial(_cancel, task)
        except InferenceError as exc:
            direct.fail(exc.message)
        except Exception as exc:
            direct.fail(str(internal(f"{type(exc).__name__}: {exc}")))
        return True

    async def _infer(self, direct: _Direct, request: InferRequest, declared: dict[str, str]) -> None:
        """A request for a model that is not decoupled that `infer_then` did not take, answered as ModelInfer's."""
        try:
            response = await self._dp.infer(request, declared)
        except Exception as exc:
            direct.answer(exc)
            return
        direct.answer(response)

    def stop(self) -> None:
        """On the loop: the stream is ending before its requests did (the client went away, the server stops):
        each is cancelled, as the session cancels its tasks, and nothing more goes out."""
        if self._out is not None:
            self._out.stop()
        with self._lock:
            taken = list(self._taken.values())
            self._taken.clear()
        for direct in taken:
            direct.cancel()

    def ended(self, direct: _Direct) -> None:
        """Any thread: `direct` sent its last message; the core counts the request answered."""
        with self._lock:
            self._taken.pop(id(direct), None)
        self._stream.answered()


class _Direct:
    """One request `DirectStreams` took: its responses as messages, in order, and its end."""

    __slots__ = ("_broken", "_codec", "_ended", "_gate", "_lock", "_out", "_refs", "_request", "_sent", "_shm",
                 "_streams", "cancel", "empty_final")

    def __init__(self, streams: DirectStreams, request: InferRequestView, gate: Gate, out: DirectSend) -> None:
        self._streams = streams
        self._codec = streams.codec
        self._shm = streams.shm
        self._request = request
        self._gate = gate
        self._out = out
        self._refs: dict[str, ShmRef] = {}
        self._lock = threading.Lock()
        self._ended = False
        self._broken = False  # a response failed to encode: the request ended with its error
        self._sent: Callable[[], None] | None = None  # the data plane's, for its final response once sent
        self.empty_final = False
        self.cancel: Callable[[], None] = _nothing  # the data plane's, once it took the request

    def started(self, empty_final: bool, refs: dict[str, ShmRef]) -> None:
        self.empty_final = empty_final
        self._refs = refs

    def emit(self, response: StreamResponse, sent: Callable[[], None] | None) -> None:
        """`stream_then`'s: any thread, in order."""
        if self._broken:
            return
        request, final, codec = self._request, response.final, self._codec
        if final:
            self._sent = sent
        after = self._end if final else self._end_if_broken
        if response.error is not None:
            message = response.error.message
            self._out.send(lambda: codec.error(request, message, final), 0, after)
        elif response.response is not None:
            answer = response.response
            self._out.send(lambda: self._encode(answer, final), response_size(answer), after)
        elif self.empty_final:
            self._out.send(lambda: codec.bare(request, final), 0, after)
        else:
            self._out.send(None, 0, after)

    def answer(self, result: InferResponse | Exception) -> None:
        """`DataPlane.infer_then`'s (any thread), for a model that is not decoupled: its one response, final, or
        its error."""
        if isinstance(result, InferResponse):
            self._out.send(lambda: self._encode(result, True), response_size(result), self._end)
            return
        if isinstance(result, InferenceError):
            self.fail(result.message)
        else:
            self.fail(str(internal(f"{type(result).__name__}: {result}")))

    def fail(self, message: str) -> None:
        """The request's error, its only message."""
        request, codec = self._request, self._codec
        self._out.send(lambda: codec.error(request, message, True), 0, self._end)

    def _encode(self, response: InferResponse, final: bool) -> StreamMessage:
        """The response's message; where encoding it fails, the request's error instead, which ends it (as the
        task path's `_answer` ends the request there: the model's later responses are dropped)."""
        try:
            return self._codec.encode(response, final, self._shm, self._refs)
        except Exception as exc:
            self._broken = True
            self._out.on_loop(self._cancel)
            return self._codec.error(self._request, str(internal(f"{type(exc).__name__}: {exc}")), True)

    def _cancel(self) -> None:
        self.cancel()

    def _end_if_broken(self) -> None:
        if self._broken:
            self._end()

    def _end(self) -> None:
        """Any thread, once: its last message was offered."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
        if self._sent is not None and not self._broken:
            self._sent()
        self._streams.ended(self)
        self._gate.leave()


def _nothing() -> None:
    pass


def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()


async def answer_stream(stream: StreamCall, inbound: Inbound[InferRequestView], outlet: Outlet,
                        dataplane: DataPlane, limit: int) -> None:
    """Runs the stream's session; its messages go out as the client takes them, then the stream ends with its
    status."""
    await ended_by_status(stream, "ModelStreamInfer", _drive(stream, inbound, outlet, dataplane, limit))


async def _drive(stream: StreamCall, inbound: Inbound[InferRequestView], outlet: Outlet, dataplane: DataPlane,
                 limit: int) -> None:
    # each request's task writes its messages itself, as does a model's thread a request taken directly
    codec = NativeCodec()
    direct = DirectStreams(dataplane, codec, stream, outlet)
    await StreamSession(dataplane, codec, limit, stream.answered).drive(inbound, outlet.send, direct)
    stream.close()
