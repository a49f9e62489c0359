"""Remote model sources the server polls: each materialises models into a local cache root in Triton's layout,
which the model manager then scans like any local repository.

- `S3Source`: one S3 repository (`s3://bucket/prefix`, or Triton's `s3://host:port/bucket/prefix`).
- `RepositoryConfigSource` (`repository/config_source.py`): the operator's JSON file naming each model's own
  source (S3 prefix or local directory), optional config overrides, and ensembles.

Both expose `root`, `async sync(models=None, in_use=()) -> SyncReport`, `found_versions()` (the version
folders each model's last successful listing showed, complete or not) and `config_digest` (the SHA-256 of the
repository config file last read and applied; None for a plain S3 repository). `sync` never raises for storage
errors: it reports them and leaves the cache as it was. Blocking work runs in threads. Completeness of
versions still being uploaded: see `ensemble_runtime.repository.remote`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ensemble_contract.names import valid_model_name

from ensemble_runtime.repository.cache import ModelCache
from ensemble_runtime.repository.remote import (
    ModelListing,
    ObjectInfo,
    S3Location,
    group_model,
    in_use_by_model,
    needs_second_listing,
    parse_s3_uri,
    settled_baseline,
    split_repository,
)
from ensemble_runtime.repository.s3 import S3Settings, S3Storage, StorageError
from ensemble_runtime.repository.sync import ModelOutcome, OriginError, materialise_model

log = logging.getLogger(__name__)

# The versions of a model the load journal says killed an earlier process while loading (LoadJournal.died_versions).
DiedVersions = Callable[[str], frozenset[int]]


def no_deaths(_model: str) -> frozenset[int]:
    return frozenset()

FETCH_ERRORS: tuple[type[BaseException], ...] = (StorageError, OriginError)


@dataclass(slots=True)
class SyncReport:
    changed: bool = False
    models_changed: set[str] = field(default_factory=set)
    errors: dict[str, str] = field(default_factory=dict)  # model or "model/version" -> reason
    error: str = ""  # the listing (or the repository config) failed as a whole; "" otherwise
    duration_s: float = 0.0
    synced: set[str] = field(default_factory=set)  # the models whose listing this sync compared with the cache
    awaited: dict[str, tuple[int, ...]] = field(default_factory=dict)  # model -> versions still uploading

    def add(self, name: str, outcome: ModelOutcome) -> None:
        self.synced.add(name)
        if outcome.changed:
            self.models_changed.add(name)
            self.changed = True
        self.errors.update(outcome.errors)
        if outcome.awaited:
            self.awaited[name] = outcome.awaited


@dataclass(frozen=True, slots=True)
class S3Origin:
    storage: S3Storage
    location: S3Location  # the model's folder

    @property
    def label(self) -> str:
        return self.location.uri()

    def read(self, item: ObjectInfo) -> bytes:
        return self.storage.read(self.location, item)

    def fetch(self, item: ObjectInfo, dest: Path) -> None:
        self.storage.download(self.location, item, dest)


@dataclass(frozen=True, slots=True)
class LocalOrigin:
    path: Path  # the model's directory

    @property
    def label(self) -> str:
        return str(self.path)

    def read(self, item: ObjectInfo) -> bytes:
        try:
            return self.path.joinpath(item.key).read_bytes()
        except OSError as exc:
            raise OriginError(f"{self.path}/{item.key}: {exc}") from None

    def fetch(self, item: ObjectInfo, dest: Path) -> None:
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.path.joinpath(item.key), dest)
        except OSError as exc:
            raise OriginError(f"{self.path}/{item.key}: {exc}") from None


def list_local(name: str, path: Path) -> ModelListing:
    """A local model directory as a listing; its 'ETag' is size and mtime, so edits are picked up."""
    if not path.is_dir():
        raise OriginError(f"{path}: not a directory")
    items: list[ObjectInfo] = []
    for dirpath, _dirs, files in os.walk(path):
        for filename in files:
            full = Path(dirpath, filename)
            stat = full.stat()
            items.append(ObjectInfo(full.relative_to(path).as_posix(), stat.st_size, f"local-{stat.st_mtime_ns}"))
    return group_model(name, items)


def versions_of(listings: Mapping[str, ModelListing]) -> dict[str, list[int]]:
    """Model -> the sorted version numbers its listing shows (complete or still being uploaded)."""
    return {name: sorted(listing.versions) for name, listing in listings.items()}


async def gather_models(
    names: Collection[str], work: Callable[[str], ModelOutcome], report: SyncReport, concurrency: int
) -> None:
    """Run `work(name)` for each model in threads, at most `concurrency` at once; failures are per model."""
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(name: str) -> None:
        async with gate:
            try:
                outcome = await asyncio.to_thread(work, name)
            except Exception as exc:  # a bug or a local disk problem: reported for this model only
                log.exception("syncing model %s failed", name)
                outcome = ModelOutcome(errors={name: f"{type(exc).__name__}: {exc}"})
            report.add(name, outcome)

    await asyncio.gather(*(one(name) for name in sorted(names)))


async def list_settled(
    list_once: Callable[[], tuple[dict[str, ModelListing], dict[str, str]]],
    previous: Mapping[str, ModelListing],
    settle: bool,
    settle_secs: float,
) -> tuple[dict[str, ModelListing], dict[str, str], dict[str, ModelListing]]:
    """List (in a thread), and list again `settle_secs` later where remote.needs_second_listing says so.

    Returns the listings, the per-model listing errors, and the listings to compare them with for completeness
    (remote.settled_baseline: the first listing where one was taken for the model, else `previous`).
    """
    listings, errors = await asyncio.to_thread(list_once)
    if not needs_second_listing(listings, previous, settle):
        return listings, errors, dict(previous)
    await asyncio.sleep(settle_secs)
    baseline = settled_baseline(previous, listings, settle)
    listings, errors = await asyncio.to_thread(list_once)
    return listings, errors, baseline


class S3Source:
    """One S3 model repository, materialised into `root`."""

    def __init__(
        self,
        uri: str,
        cache_dir: Path,
        settings: S3Settings | None = None,
        *,
        settle_secs: float = 1.0,
        concurrency: int = 4,
        died_versions: DiedVersions = no_deaths,
    ) -> None:
        self.location = parse_s3_uri(uri)
        self._died_versions = died_versions  # RemoteURIError: a configuration error, raised at startup
        self.root = cache_dir
        self._settings = settings or S3Settings()
        self._settle_secs = settle_secs
        self._concurrency = concurrency
        self._cache = ModelCache(cache_dir)
        self._storage: S3Storage | None = None
        self._previous: dict[str, ModelListing] | None = None  # the last successful listing, per model
        self.config_digest: str | None = None  # no repository config file here
        self.declared: frozenset[str] | None = frozenset()  # no file names models: the bucket's are what it has

    def _storage_now(self) -> S3Storage:
        if self._storage is None:
            self._cache.prepare()
            self._storage = S3Storage(self._settings, self.location.endpoint_url)
        return self._storage

    def found_versions(self) -> dict[str, list[int]]:
        return versions_of(self._previous or {})

    def _list(self, models: Collection[str] | None) -> dict[str, ModelListing]:
        storage = self._storage_now()
        if models is None:
            return split_repository(storage.list(self.location))
        out: dict[str, ModelListing] = {}
        for name in models:
            listing = group_model(name, storage.list(self.location.child(name)))
            if listing.config is not None or listing.versions:
                out[name] = listing
        return out

    async def sync(
        self, models: Collection[str] | None = None, in_use: Collection[tuple[str, int]] = (), *, settle: bool = False
    ) -> SyncReport:
        """Bring the cache in line with S3. `settle`: list twice, settle_secs apart, now (an explicit load
        cannot wait for the next poll); otherwise a version needs the same listing in two consecutive syncs."""
        started = time.monotonic()
        report = SyncReport()
        wanted = None if models is None else {name for name in models if valid_model_name(name)}
        for name in set(models or ()) - (wanted or set()):
            report.errors[name] = f"'{name}' is not a valid model name"
        try:
            listings, _, previous = await list_settled(
                lambda: (self._list(wanted), {}), self._previous or {}, settle, self._settle_secs
            )
        except StorageError as exc:
            report.error = str(exc)
        except OSError as exc:  # the cache directory itself
            report.error = f"cache {self.root}: {exc}"
        if report.error:
            log.warning("S3 sync of %s: %s", self.location.uri(), report.error)
            report.duration_s = time.monotonic() - started
            return report
        scope = set(listings) | (self._cache.models() if wanted is None else wanted)
        serving = in_use_by_model(in_use)
        storage = self._storage_now()

        def work(name: str) -> ModelOutcome:
            origin = S3Origin(storage, self.location.child(name))
            return materialise_model(
                self._cache, name, origin, listings.get(name), previous.get(name),
                serving.get(name, set()), fetch_errors=FETCH_ERRORS, died=self._died_versions(name),
            )  # fmt: skip

        await gather_models(scope, work, report, self._concurrency)
        current = dict(self._previous or {})
        for name in scope:
            current.pop(name, None)
        current.update(listings)
        self._previous = current
        report.duration_s = time.monotonic() - started
        return report
