"""Decoupled Python models: `request.get_response_sender()` and the responses it sends.

As in Triton's python_backend, a decoupled model's `execute` returns None and answers each request through
its sender, from `execute` or from any thread it starts, zero or many times, the last call carrying
`TRITONSERVER_RESPONSE_COMPLETE_FINAL` (with a response or alone). Misuse raises `TritonModelException` with
Triton's messages.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from ensemble_runtime.backends.python.pb_types import TRITONSERVER_RESPONSE_COMPLETE_FINAL, TritonModelException
from ensemble_runtime.errors import ErrorCode, InferenceError
from ensemble_runtime.responses import ResponseChannel, StreamItem

# What a sent response (not None) becomes: outputs checked against the request, or an error item.
Convert = Callable[[object, bool], StreamItem]


class InferenceResponseSender:
    """Triton's `InferenceResponseSender`: `send(response=None, flags=0)` and `is_cancelled()`."""

    def __init__(self, channel: ResponseChannel, convert: Convert, model: str) -> None:
        self._channel = channel
        self._convert = convert
        self._model = model
        self._lock = threading.Lock()  # sends from several threads keep one order and one final
        self._closed = False

    def send(self, response: object = None, flags: int = 0) -> None:
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        final = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
        item = StreamItem(final=True) if response is None else self._convert(response, final)
        with self._lock:
            if self._closed:
                raise TritonModelException("Unable to send response. Response sender has been closed.")
            self._closed = final
            self._channel.put(item)

    def is_cancelled(self) -> bool:
        """True once the client has gone away (the stream was cancelled or closed)."""
        return self._channel.cancelled

    @property
    def closed(self) -> bool:
        return self._closed

    def fail(self, error: InferenceError) -> None:
        """End the request with `error` unless the model already sent its final flag (execute raised)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._channel.put(StreamItem(error=error, final=True))

    def __del__(self) -> None:
        # A sender dropped without its final flag would leave the client waiting for ever: end the request.
        if self._closed:
            return
        self._closed = True
        message = (f"model '{self._model}': the response sender was released without sending "
                   "TRITONSERVER_RESPONSE_COMPLETE_FINAL")
        with contextlib.suppress(Exception):  # at interpreter exit there may be nothing left to tell
            self._channel.put(StreamItem(error=InferenceError(ErrorCode.INTERNAL, message), final=True))
