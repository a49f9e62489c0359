"""Transport-neutral error type; protocol/ maps codes onto gRPC and HTTP statuses."""

from __future__ import annotations

import asyncio
import enum


class ErrorCode(enum.Enum):
    """The situations Triton distinguishes, named after the gRPC codes it uses for them."""

    INVALID_ARGUMENT = "invalid_argument"
    NOT_FOUND = "not_found"
    UNAVAILABLE = "unavailable"
    INTERNAL = "internal"
    RESOURCE_EXHAUSTED = "resource_exhausted"
    ALREADY_EXISTS = "already_exists"
    FAILED_PRECONDITION = "failed_precondition"
    UNIMPLEMENTED = "unimplemented"
    CANCELLED = "cancelled"


class InferenceError(Exception):
    """An error with a code a client can act on and a message naming the problem."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"InferenceError({self.code.name}, {self.message!r})"


class ResponseError(InferenceError):
    """An error the model itself answered in a response: the request ran, so the model's statistics count it a
    success, as Triton's python backend does (an ensemble that gets one still fails)."""


NAME_LIMIT = 256  # characters of a client-supplied string an error message repeats
MESSAGE_LIMIT = 4096  # characters of any error message a transport sends (gRPC puts it in a header)


def quote_name(text: str, limit: int = NAME_LIMIT) -> str:
    """A client-supplied string (model, tensor, version...) as an error message quotes it: in single quotes and
    cut to `limit` characters with an ellipsis, so an echoed name can never make the message unbounded."""
    return f"'{bounded(text, limit)}'"


def bounded(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """`text` cut to at most `limit` characters, the cut marked with an ellipsis."""
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


def invalid(message: str) -> InferenceError:
    return InferenceError(ErrorCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> InferenceError:
    return InferenceError(ErrorCode.NOT_FOUND, message)


def unavailable(message: str) -> InferenceError:
    return InferenceError(ErrorCode.UNAVAILABLE, message)


def internal(message: str) -> InferenceError:
    return InferenceError(ErrorCode.INTERNAL, message)


def failure_reason(exc: BaseException, ensemble: bool = False) -> str:
    """The `reason` Triton's `nv_inference_request_failure` gives a failed request: CANCELED (cancelled by the
    client or the server), REJECTED (turned away before it ran: queue full, unloading, stopping), OTHER (an
    ensemble's, whatever failed inside it, as tritonserver counts it) or BACKEND (the model's execution failed)."""
    if isinstance(exc, asyncio.CancelledError) or getattr(exc, "code", None) == ErrorCode.CANCELLED:
        return "CANCELED"
    if getattr(exc, "code", None) == ErrorCode.UNAVAILABLE:
        return "REJECTED"
    return "OTHER" if ensemble else "BACKEND"


def must_propagate(exc: BaseException) -> bool:
    """Whether a BaseException caught where model code is called must pass on: the cancellation of our own
    task and a generator being closed. Everything else model code raises (SystemExit, KeyboardInterrupt, any
    BaseException subclass) is contained there and becomes an error naming the model; left alone, asyncio
    re-raises SystemExit and KeyboardInterrupt out of the event loop and the whole server ends."""
    return isinstance(exc, asyncio.CancelledError | GeneratorExit)
