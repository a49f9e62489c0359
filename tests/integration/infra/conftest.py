from __future__ import annotations

import sys
from pathlib import Path

# `tests.infra` is imported as a package rooted at the repository root.
_REPO_ROOT = str(Path(__file__).resolve().parents[3])
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

from tests.infra.conftest_plugin import control_plane, minio_server, tool_locator  # noqa: E402

__all__ = ["control_plane", "minio_server", "tool_locator"]
