"""What may escape a codec in a fuzz target: the project's own errors with a client-error code. Anything else is
a finding (atheris reports it as a crash and writes the input to the artifact directory)."""

from __future__ import annotations

from collections.abc import Callable

from ensemble_runtime.config.model_config import ConfigError
from ensemble_runtime.errors import ErrorCode, InferenceError

CLIENT_CODES = frozenset({ErrorCode.INVALID_ARGUMENT, ErrorCode.NOT_FOUND, ErrorCode.UNIMPLEMENTED,
                          ErrorCode.RESOURCE_EXHAUSTED})


def check(call: Callable[[], object]) -> None:
    """Run one decode; let only clear client errors pass."""
    try:
        call()
    except InferenceError as exc:
        if exc.code not in CLIENT_CODES or not exc.message.strip():
            raise AssertionError(f"not a clear client error: {exc!r}") from exc
    except ConfigError as exc:
        if not str(exc).strip():
            raise AssertionError("a ConfigError with no message") from exc
