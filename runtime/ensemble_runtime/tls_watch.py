"""Renewed TLS files taken while serving: the gRPC port's certificate, key and client roots are read again every
`--grpc-tls-reload-secs`, and contents that changed are handed to the front end, which serves the connections
accepted from then on with them (those open keep theirs). A Kubernetes Secret's renewal (cert-manager's) reaches a
pod's files without a restart, swapped whole by the kubelet; files written one by one may be read half-renewed (a
new certificate beside the old key): the front end refuses those, the port keeps what it serves, and the next
read takes them once they match. Each problem is logged once, not at every read, and counted for the metrics
port (`Renewals`).

The three files are read one by one, so a read can straddle the kubelet's swap. It may then return the old
certificate and key beside the new client roots: a pair that matches, which the port would take, refusing every
client of the old CA until the next renewal. So the set is read twice in a row, and taken only when both reads
agree; otherwise the next check reads it again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from ensemble_runtime.grpc_tls import GrpcTls

log = logging.getLogger(__name__)


@dataclass
class Renewals:
    """What became of renewed files: how many were taken, how many refused (each distinct problem once), and
    whether the files there now are refused, so that the port serves older ones."""

    taken: int = 0
    refused: int = 0
    refusing: bool = False


class TlsWatch:
    """Hands `renew` the files `read` returns whenever they differ from those `serving` (ValueError from either:
    what is wrong with them, logged; the port keeps what it serves)."""

    def __init__(self, serving: GrpcTls, read: Callable[[], GrpcTls | None], renew: Callable[[GrpcTls], None],
                 interval_secs: float) -> None:
        self._serving = serving
        self._read = read
        self._renew = renew
        self._interval = interval_secs
        self._refused: GrpcTls | str | None = None  # what was last refused (files, or why they could not be read)
        self.renewals = Renewals()

    @property
    def serving(self) -> GrpcTls:
        return self._serving

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.check()

    async def check(self) -> bool:
        """Reads the files once (off the event loop) and hands them on if they changed; whether they were taken."""
        try:
            fresh = await asyncio.to_thread(self._read_settled)
        except ValueError as exc:
            self._refuse(str(exc), f"gRPC {self._serving.describe()}: cannot read the renewed files ({exc}); "
                                   "serving with those read before")
            return False
        if fresh == self._serving:
            self._refused = None  # what went wrong went away: say it again if it comes back
            self.renewals.refusing = False
            return False
        if fresh is None or fresh == self._refused:
            return False
        try:
            self._renew(fresh)
        except ValueError as exc:
            self._refuse(fresh, f"gRPC {self._serving.describe()}: the renewed files are refused ({exc}); serving "
                                "with those read before until they change again")
            return False
        self._serving, self._refused = fresh, None
        self.renewals.taken += 1
        self.renewals.refusing = False
        log.info("gRPC %s: renewed certificate files taken; connections accepted from now on use them",
                 fresh.describe())
        return True

    def _read_settled(self) -> GrpcTls | None:
        """The files, when two reads in a row agree; None while they are being replaced."""
        first = self._read()
        second = self._read()
        return second if second == first else None

    def _refuse(self, what: GrpcTls | str, message: str) -> None:
        if what != self._refused:
            log.warning("%s", message)
            self.renewals.refused += 1
        self._refused = what
        self.renewals.refusing = True
