"""thread_policy at its seams: the choices, the thread ids it finds, a thread that ended meanwhile. The policy
itself is checked on real runtime processes (tests/integration/runtime/test_thread_policy.py); this process's
own threads are left as they are."""

from __future__ import annotations

import os
import threading

import pytest
from ensemble_runtime import thread_policy
from ensemble_runtime.settings import parse_settings


def test_inherit_is_the_default_and_batch_the_other_choice() -> None:
    assert parse_settings([]).thread_policy == thread_policy.INHERIT
    assert parse_settings(["--thread-policy=batch"]).thread_policy == thread_policy.BATCH
    with pytest.raises(SystemExit):
        parse_settings(["--thread-policy=fifo"])


def test_thread_ids_are_this_process_threads() -> None:
    ready, stop = threading.Event(), threading.Event()
    ids: list[int] = []

    def run() -> None:
        ids.append(threading.get_native_id())
        ready.set()
        stop.wait(30)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert ready.wait(30)
        found = thread_policy.thread_ids()
        assert os.getpid() in found and ids[0] in found and threading.get_native_id() in found
    finally:
        stop.set()
        thread.join()


def test_inherit_changes_nothing_and_an_unknown_policy_is_refused() -> None:
    before = os.sched_getscheduler(0)
    assert thread_policy.apply(thread_policy.INHERIT) is None
    assert os.sched_getscheduler(0) == before
    with pytest.raises(ValueError, match="unknown thread policy 'fifo'"):
        thread_policy.apply("fifo")


def test_a_thread_that_ended_meanwhile_is_passed_over() -> None:
    gone = 2**22 + 1  # past the largest pid_max Linux allows (2**22): no thread has this id
    assert thread_policy.apply(thread_policy.BATCH, [gone]) is None
