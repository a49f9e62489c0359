"""The CPUs a test's runtime starts on."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def pinned(cpus: set[int]) -> Iterator[None]:
    """This thread (and so the processes it starts) on `cpus` only, for a while."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
