"""Which model names a request may carry, and the one answer for a name the repository does not hold. Pure.

A name arriving on the repository API becomes a directory (and S3 prefix) lookup; a name that could reach
outside the repository root (a separator, `..`, a NUL) is never looked up at all, and gets exactly the answer
an unknown name gets, so no request can learn whether some other file exists.
"""

from __future__ import annotations

from ensemble_runtime.errors import quote_name

MAX_NAME_BYTES = 255  # a directory name on common filesystems


def valid_model_name(name: str) -> bool:
    """True when `name` can only ever name a directory directly under a repository root."""
    if not name or len(name.encode("utf-8", errors="replace")) > MAX_NAME_BYTES:
        return False
    if name in (".", "..") or name.startswith("."):
        return False
    return not any(c in "/\\" or ord(c) < 0x20 or ord(c) == 0x7F for c in name)


def not_in_repository(name: str) -> str:
    """The reason a load of an unknown (or impossible) model name fails."""
    return f"model {quote_name(name)} is not in any model repository"


def load_failed(name: str, reason: str) -> str:
    return f"failed to load {quote_name(name)}: {reason}"
