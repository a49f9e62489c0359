"""TlsWatch's decisions, through its two seams (how the files are read, how the port takes them): changed files
handed on once, unchanged ones not, a read that straddles a swap not, refused or unreadable ones logged once and
the served ones kept, and a problem said again when it comes back after going away. The real files and front ends: tests/integration/runtime/
test_grpc_tls_renewal.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
from ensemble_runtime.grpc_tls import GrpcTls
from ensemble_runtime.tls_watch import Renewals, TlsWatch

FIRST = GrpcTls(b"cert-1", b"key-1", b"roots-1")
RENEWED = GrpcTls(b"cert-2", b"key-2", b"roots-2")
HALF = GrpcTls(b"cert-2", b"key-1", b"roots-2")  # a certificate beside another's key


class Files:
    """What the watch reads next (a GrpcTls, or why it cannot be read), and what the port was handed."""

    def __init__(self) -> None:
        self.now: GrpcTls | str = FIRST
        self.handed: list[GrpcTls] = []

    def read(self) -> GrpcTls:
        if isinstance(self.now, str):
            raise ValueError(self.now)
        return self.now

    def renew(self, tls: GrpcTls) -> None:
        self.handed.append(tls)
        if tls.certificate_chain[-1:] != tls.private_key[-1:]:
            raise ValueError("the server certificate and key: they do not match")


def _checks(watch: TlsWatch, times: int) -> list[bool]:
    async def run() -> list[bool]:
        return [await watch.check() for _ in range(times)]

    return asyncio.run(run())


class Records(logging.Handler):
    """The watch's own log records, caught on its logger (whatever an earlier test did to the root's handlers)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def warnings(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno == logging.WARNING]


@pytest.fixture
def logged() -> Iterator[Records]:
    logger = logging.getLogger("ensemble_runtime.tls_watch")
    records, level = Records(), logger.level
    logger.addHandler(records)
    logger.setLevel(logging.INFO)
    yield records
    logger.removeHandler(records)
    logger.setLevel(level)


def test_changed_files_are_handed_on_once_and_unchanged_ones_never() -> None:
    files = Files()
    watch = TlsWatch(FIRST, files.read, files.renew, interval_secs=1.0)
    assert _checks(watch, 2) == [False, False]
    files.now = RENEWED
    assert _checks(watch, 3) == [True, False, False]
    assert files.handed == [RENEWED]
    assert watch.serving == RENEWED
    assert watch.renewals == Renewals(taken=1, refused=0, refusing=False)


def test_a_read_that_straddles_a_swap_is_not_taken() -> None:
    """The three files are read one by one and can straddle the kubelet's swap of them all: the old certificate and
    key beside the new roots match, and the port would take them. Two reads in a row must agree."""
    files = Files()
    straddled = GrpcTls(b"cert-1", b"key-1", b"roots-2")
    reads = iter([straddled, RENEWED, RENEWED, RENEWED])
    watch = TlsWatch(FIRST, lambda: next(reads), files.renew, interval_secs=1.0)
    assert _checks(watch, 2) == [False, True]
    assert files.handed == [RENEWED]
    assert watch.renewals == Renewals(taken=1, refused=0, refusing=False)


def test_refused_files_keep_those_served_are_logged_once_and_not_handed_again(
        logged: Records) -> None:
    files = Files()
    watch = TlsWatch(FIRST, files.read, files.renew, interval_secs=1.0)
    files.now = HALF
    assert _checks(watch, 4) == [False] * 4
    assert files.handed == [HALF]
    assert watch.serving == FIRST
    (warning,) = logged.warnings()
    assert "refused (the server certificate and key: they do not match)" in warning
    assert watch.renewals == Renewals(taken=0, refused=1, refusing=True)
    files.now = RENEWED
    assert _checks(watch, 1) == [True]
    assert watch.serving == RENEWED
    assert watch.renewals == Renewals(taken=1, refused=1, refusing=False)


def test_unreadable_files_are_logged_once_and_again_if_they_come_back(logged: Records) -> None:
    files = Files()
    watch = TlsWatch(FIRST, files.read, files.renew, interval_secs=1.0)
    files.now = "--grpc-server-cert '/etc/tls/tls.crt': No such file or directory"
    assert _checks(watch, 3) == [False] * 3
    assert len(logged.warnings()) == 1
    assert watch.renewals.refusing
    files.now = FIRST  # back as they were: nothing to hand on, and the problem gone
    assert _checks(watch, 1) == [False]
    assert watch.renewals == Renewals(taken=0, refused=1, refusing=False)
    files.now = "--grpc-server-cert '/etc/tls/tls.crt': No such file or directory"
    assert _checks(watch, 2) == [False] * 2
    assert len(logged.warnings()) == 2
    assert "cannot read the renewed files (--grpc-server-cert" in logged.warnings()[0]
    assert files.handed == []


def test_the_watch_runs_until_cancelled_checking_every_interval() -> None:
    files = Files()
    watch = TlsWatch(FIRST, files.read, files.renew, interval_secs=0.01)
    files.now = RENEWED

    async def run() -> None:
        task = asyncio.create_task(watch.run())
        while watch.serving != RENEWED:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(run(), timeout=30))
    assert files.handed == [RENEWED]
