"""The load journal: which model versions were loading when the process last ended, so that a version whose
load killed the process (`os._exit`, a crash in a native extension, the OOM killer) is not loaded again after
the restart and the pod does not crash-loop on it.

A JSON file, rewritten whole (written to a temporary file, fsync'd, renamed over the old one, directory
fsync'd) before a version's load starts and after it ends either way. Entries are keyed by model, version and
the version's fingerprint (config and files), so a fixed re-upload of the same version number is tried again.
What the file holds at startup is what died: those entries stay in the file (a second crash of something else
must not forget them) until the same model version loads with other content. A missing or unreadable file
counts as empty: the journal never stops the server from starting. See docs/s3.md, "Load journal".
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DIED_LOADING = "the runtime died while loading this version"
JOURNAL_FILENAME = "load-journal"


@dataclass(frozen=True, slots=True, order=True)
class JournalKey:
    model: str
    version: int
    fingerprint: str


def encode(keys: set[JournalKey]) -> bytes:
    entries = [{"model": k.model, "version": k.version, "fingerprint": k.fingerprint} for k in sorted(keys)]
    return json.dumps({"loading": entries}, indent=1).encode()


def decode(data: bytes) -> set[JournalKey]:
    """The entries of a journal file; ValueError when it is not one."""
    doc: Any = json.loads(data)
    entries = doc.get("loading") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise ValueError("no 'loading' list")
    keys: set[JournalKey] = set()
    for entry in entries:
        if not isinstance(entry, dict):
            raise ValueError(f"entry {entry!r} is not an object")
        model, version, fingerprint = entry.get("model"), entry.get("version"), entry.get("fingerprint")
        if not isinstance(model, str) or not isinstance(version, int) or not isinstance(fingerprint, str):
            raise ValueError(f"entry {entry!r} lacks model, version or fingerprint")
        keys.add(JournalKey(model, version, fingerprint))
    return keys


class LoadJournal:
    """Thread-safe; `begin` and `end` write the file (call them off the event loop: they fsync)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._loading: set[JournalKey] = set()
        self._died = self._read()
        for key in sorted(self._died):
            log.warning("model '%s' version %d: %s (load journal %s); it is not loaded again until its "
                        "content changes", key.model, key.version, DIED_LOADING, path)

    def _read(self) -> set[JournalKey]:
        try:
            return decode(self.path.read_bytes())
        except FileNotFoundError:
            return set()
        except (OSError, ValueError) as exc:
            log.error("load journal %s is unreadable (%s); starting with an empty journal", self.path, exc)
            return set()

    def died(self, model: str, version: int, fingerprint: str) -> bool:
        """Whether this exact version was loading when an earlier process died."""
        return JournalKey(model, version, fingerprint) in self._died

    def died_versions(self, model: str) -> frozenset[int]:
        """The versions of `model` an earlier process died loading, whatever their content (the repository
        sync keeps them and the versions to fall back on: repository.remote.version_changes)."""
        return frozenset(key.version for key in self._died if key.model == model)

    def any_died(self, model: str) -> bool:
        return any(key.model == model for key in self._died)

    def begin(self, model: str, version: int, fingerprint: str) -> None:
        key = JournalKey(model, version, fingerprint)
        with self._lock:
            # other content under the same version number is being tried: its old crash no longer applies
            self._died = {k for k in self._died if (k.model, k.version) != (model, version)}
            self._loading.add(key)
            self._write()

    def end(self, model: str, version: int, fingerprint: str) -> None:
        with self._lock:
            self._loading.discard(JournalKey(model, version, fingerprint))
            self._write()

    def _write(self) -> None:
        try:
            _write_atomically(self.path, encode(self._died | self._loading))
        except OSError as exc:  # a full or read-only disk must not fail loads; the protection is lost
            log.error("cannot write the load journal %s: %s", self.path, exc)


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
