"""Which names a model (or ensemble) in a repository may carry. Pure.

A name becomes a directory (and an S3 prefix) under a repository root, so a name that could reach outside the
root (a separator, `..`, a NUL or other control character) or that differs from its stripped self is refused.
"""

from __future__ import annotations

MAX_NAME_BYTES = 255  # a directory name on common filesystems


def valid_model_name(name: str) -> bool:
    """True when `name` can only ever name a directory directly under a repository root."""
    if not name or name != name.strip() or len(name.encode("utf-8", errors="replace")) > MAX_NAME_BYTES:
        return False
    if name.startswith("."):
        return False
    return not any(c in "/\\" or ord(c) < 0x20 or ord(c) == 0x7F for c in name)
