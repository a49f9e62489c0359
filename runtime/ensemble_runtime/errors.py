"""Transport-neutral error type; protocol/ maps codes onto gRPC and HTTP statuses."""

from __future__ import annotations

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


def invalid(message: str) -> InferenceError:
    return InferenceError(ErrorCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> InferenceError:
    return InferenceError(ErrorCode.NOT_FOUND, message)


def unavailable(message: str) -> InferenceError:
    return InferenceError(ErrorCode.UNAVAILABLE, message)


def internal(message: str) -> InferenceError:
    return InferenceError(ErrorCode.INTERNAL, message)


NAME_LIMIT = 128  # characters of a client-supplied name echoed into a message or a log line


def clip(name: str, limit: int = NAME_LIMIT) -> str:
    """`name` as a message may quote it: at most `limit` characters, the rest counted, not echoed."""
    if len(name) <= limit:
        return name
    return f"{name[:limit]}...({len(name) - limit} more characters)"
