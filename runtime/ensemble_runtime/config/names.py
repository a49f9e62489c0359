"""Which model names a request may carry, and the one answer for a name the repository does not hold. Pure.

A name arriving on the repository API becomes a directory (and S3 prefix) lookup; a name that could reach
outside the repository root (a separator, `..`, a NUL) is never looked up at all, and gets exactly the answer
an unknown name gets, so no request can learn whether some other file exists.
"""

from __future__ import annotations

from ensemble_contract.names import MAX_NAME_BYTES, valid_model_name

from ensemble_runtime.errors import quote_name

__all__ = ["MAX_NAME_BYTES", "load_failed", "not_in_repository", "valid_model_name"]


def not_in_repository(name: str) -> str:
    """The reason a load of an unknown (or impossible) model name fails."""
    return f"model {quote_name(name)} is not in any model repository"


def load_failed(name: str, reason: str) -> str:
    return f"failed to load {quote_name(name)}: {reason}"
