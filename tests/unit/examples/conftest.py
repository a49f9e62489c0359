"""One generated example repository per session (tests that change files build their own)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ensemble_examples.repository import build_repository


@pytest.fixture(scope="session")
def example_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("model_repository")
    build_repository(root)
    return root
