"""Fixtures for the HTTP transport tests: one server per module (see http_harness)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.http.http_harness import Served, ServerThread, build_repository


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    repo = tmp_path_factory.mktemp("repo")
    build_repository(repo)
    thread = ServerThread(repo)
    try:
        yield thread.start()
    finally:
        thread.stop()
