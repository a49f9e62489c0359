"""Requests to the real Triton peer, when a test compares ours with it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from tritonclient.utils import InferenceServerException

from bench.triton_peer import stub_missed_health_window


@contextlib.contextmanager
def peer_request() -> Iterator[None]:
    """Around a request to tritonserver: if its python backend fails it for its own stub health window
    (`stub_missed_health_window`), the test is skipped with Triton's message, since there is nothing to compare
    with. Any other error is raised."""
    try:
        yield
    except InferenceServerException as exc:
        if stub_missed_health_window(str(exc)):
            pytest.skip(f"tritonserver failed its own request (its python stub's one-second health window): {exc}")
        raise
