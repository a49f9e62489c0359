"""bench.pa.threads: per-thread counters from /proc, and their difference per request."""

from __future__ import annotations

import os
import threading
import time

from bench.pa.threads import ThreadSample, lines, parse_thread, per_request, sample


def test_parse_thread_reads_a_name_with_spaces_and_parentheses() -> None:
    stat = "4242 (my (odd) name) S 1 2 3 4 5 6 7 8 9 10 120 30 0 0 20 0 1 0"
    status = "Name:\tx\nvoluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches:\t3\n"
    assert parse_thread(stat, status) == ThreadSample("my (odd) name", 120, 30, 17, 3)


def test_sample_sees_this_process_and_a_thread_that_works_and_sleeps() -> None:
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            sum(range(10_000))
            time.sleep(0.001)

    worker = threading.Thread(target=work)
    worker.start()
    try:
        before = sample(os.getpid())
        deadline = time.monotonic() + 60
        after = sample(os.getpid())
        while time.monotonic() < deadline:  # until the worker has slept and burnt a tick, however busy the box
            after = sample(os.getpid())
            grew = [t for t, s in after.items() if t in before and t != os.getpid()
                    and s.voluntary > before[t].voluntary and s.user_ticks + s.system_ticks
                    > before[t].user_ticks + before[t].system_ticks]
            if grew:
                break
            time.sleep(0.01)
    finally:
        stop.set()
        worker.join()
    assert os.getpid() in before and os.getpid() in after
    rows = per_request(os.getpid(), before, after, requests=10)
    assert any(r["thread"] != "main" and r["voluntary_switches"] > 0 for r in rows)


def test_per_request_divides_and_skips_idle_new_and_gone_threads() -> None:
    before = {1: ThreadSample("python", 100, 10, 5, 1), 2: ThreadSample("grpc-core", 50, 50, 10, 0),
              3: ThreadSample("idle", 7, 7, 7, 7), 4: ThreadSample("gone", 1, 1, 1, 1)}
    after = {1: ThreadSample("python", 300, 30, 25, 11), 2: ThreadSample("grpc-core", 150, 100, 30, 0),
             3: ThreadSample("idle", 7, 7, 7, 7), 5: ThreadSample("new", 9, 9, 9, 9)}
    rows = per_request(1, before, after, requests=100, ticks_per_second=10_000)  # a tick is 100 us
    assert rows == [
        {"thread": "main", "user_us": 200.0, "system_us": 20.0, "voluntary_switches": 0.2,
         "involuntary_switches": 0.1},
        {"thread": "grpc-core/2", "user_us": 100.0, "system_us": 50.0, "voluntary_switches": 0.2,
         "involuntary_switches": 0.0},
    ]
    assert per_request(1, before, after, requests=0) == []
    printed = lines("ours", rows)
    assert len(printed) == 3 and "all threads" in printed[-1] and "user  300.0 us" in printed[-1]
