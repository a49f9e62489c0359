from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "triton: needs the real Triton peer (tools/setup-triton.sh; skipped without it)")
