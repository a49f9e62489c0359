"""The operator's repository config as a source: a JSON file naming each model's own source (S3 prefix or local
directory), optional config overrides, and ensembles, materialised into one cache root (the interface of
`ensemble_runtime.repository.sources`, which holds what both sources share)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Collection
from pathlib import Path

from ensemble_contract.repository import RepositoryConfig
from google.protobuf import text_format

from ensemble_runtime.config.model_config import ConfigError, parse_config_override
from ensemble_runtime.repository.cache import ModelCache
from ensemble_runtime.repository.remote import (
    ModelListing,
    RepositoryConfigError,
    S3Location,
    group_model,
    in_use_by_model,
    parse_repository_config,
    parse_s3_uri,
)
from ensemble_runtime.repository.s3 import S3Settings, S3Storage, StorageError
from ensemble_runtime.repository.sources import (
    FETCH_ERRORS,
    DiedVersions,
    LocalOrigin,
    S3Origin,
    SyncReport,
    gather_models,
    list_local,
    list_settled,
    no_deaths,
    versions_of,
)
from ensemble_runtime.repository.sync import ConfigText, ModelOutcome, OriginError, materialise_model

log = logging.getLogger(__name__)


class RepositoryConfigSource:
    """Models named in the operator's JSON file, each from its own source, materialised into `root`."""

    def __init__(
        self,
        config_path: Path,
        cache_dir: Path,
        settings: S3Settings | None = None,
        *,
        settle_secs: float = 1.0,
        concurrency: int = 4,
        died_versions: DiedVersions = no_deaths,
    ) -> None:
        self.config_path = config_path
        self._died_versions = died_versions
        self.root = cache_dir
        self._settings = settings or S3Settings()
        self._settle_secs = settle_secs
        self._concurrency = concurrency
        self._cache = ModelCache(cache_dir)
        self._storages: dict[tuple[str | None, str | None, str | None], S3Storage] = {}
        self._previous: dict[str, ModelListing] = {}  # the last successful S3 listing, per model
        self._local: dict[str, ModelListing] = {}  # the last listing of each local-directory model
        self._prepared = False
        self.config_digest: str | None = None  # SHA-256 (hex) of the file as last read and parsed
        self.declared: frozenset[str] | None = None  # the models the file names, as last read (None: never)

    def found_versions(self) -> dict[str, list[int]]:
        return {**versions_of(self._previous), **versions_of(self._local)}

    def _read_config(self) -> RepositoryConfig:
        try:
            raw = self.config_path.read_bytes()
        except OSError as exc:
            raise RepositoryConfigError(f"{self.config_path}: cannot read: {exc.strerror or exc}") from None
        try:
            spec = parse_repository_config(json.loads(raw.decode("utf-8")))
            self.config_digest = hashlib.sha256(raw).hexdigest()  # the operator compares it with what it wrote
            return spec
        except UnicodeDecodeError as exc:
            raise RepositoryConfigError(f"{self.config_path}: not UTF-8: {exc}") from None
        except json.JSONDecodeError as exc:
            raise RepositoryConfigError(f"{self.config_path}: malformed JSON: {exc}") from None
        except RepositoryConfigError as exc:
            raise RepositoryConfigError(f"{self.config_path}: {exc}") from None

    def _storage_for(self, location: S3Location, spec: RepositoryConfig) -> S3Storage:
        endpoint = location.endpoint_url or spec.endpoint_url or self._settings.endpoint_url
        key = (endpoint, spec.region, self._settings.region)
        if key not in self._storages:
            settings = dataclasses.replace(self._settings, region=spec.region or self._settings.region)
            self._storages[key] = S3Storage(settings, endpoint)
        return self._storages[key]

    def _list_s3(
        self, spec: RepositoryConfig, names: Collection[str]
    ) -> tuple[dict[str, ModelListing], dict[str, str]]:
        listings: dict[str, ModelListing] = {}
        errors: dict[str, str] = {}
        for model in spec.models:
            if model.name in names and model.source.startswith("s3://"):
                location = parse_s3_uri(model.source)
                try:
                    listings[model.name] = group_model(model.name, self._storage_for(location, spec).list(location))
                except (StorageError, ValueError) as exc:
                    errors[model.name] = str(exc)
        return listings, errors

    async def sync(
        self, models: Collection[str] | None = None, in_use: Collection[tuple[str, int]] = (), *, settle: bool = False
    ) -> SyncReport:
        """As S3Source.sync, for every model the repository config names."""
        started = time.monotonic()
        report = SyncReport()
        try:
            spec = await asyncio.to_thread(self._read_config)
        except RepositoryConfigError as exc:
            report.error = str(exc)
            log.warning("repository config: %s", report.error)
            report.duration_s = time.monotonic() - started
            return report
        if not self._prepared:
            await asyncio.to_thread(self._cache.prepare)
            self._prepared = True
        declared = spec.names()
        self.declared = frozenset(declared)
        scope = (declared | self._cache.models()) if models is None else set(models)
        listings, list_errors, previous = await list_settled(
            lambda: self._list_s3(spec, scope), self._previous, settle, self._settle_secs
        )
        report.errors.update(list_errors)
        s3_models = [m.name for m in spec.models if m.name in scope and m.source.startswith("s3://")]
        if s3_models and all(name in list_errors for name in s3_models):
            report.error = next(iter(list_errors.values()))
        serving = in_use_by_model(in_use)

        def work(name: str) -> ModelOutcome:
            try:
                return self._materialise(name, spec, listings, previous, serving.get(name, set()))
            except (ConfigError, OriginError) as exc:  # a bad override, a missing local directory
                return ModelOutcome(errors={name: str(exc)})

        runnable = {name for name in scope if name not in list_errors and (name in declared or models is None)}
        for name in set(scope) - runnable - set(list_errors):
            report.errors[name] = f"model '{name}' is not in {self.config_path}"
        await gather_models(runnable, work, report, self._concurrency)
        for name in scope:
            if name not in list_errors:
                self._previous.pop(name, None)
        self._previous.update(listings)
        report.duration_s = time.monotonic() - started
        return report

    def _materialise(
        self,
        name: str,
        spec: RepositoryConfig,
        listings: dict[str, ModelListing],
        previous: dict[str, ModelListing],
        in_use: Collection[int],
    ) -> ModelOutcome:
        nowhere = LocalOrigin(self.root / ".none")
        self._local.pop(name, None)  # runs in a thread, one per model: each touches only its own key
        ensemble = next((e for e in spec.ensembles if e.name == name), None)
        if ensemble is not None:
            config = _override(name, ensemble.config_pbtxt, self.config_path)
            empty = ModelListing(name)
            return materialise_model(self._cache, name, nowhere, empty, empty, in_use, config, FETCH_ERRORS)
        model = next((m for m in spec.models if m.name == name), None)
        if model is None:  # dropped from the file: removed (unless in use)
            return materialise_model(self._cache, name, nowhere, None, None, in_use)
        override = None if model.config_pbtxt is None else _override(name, model.config_pbtxt, self.config_path)
        origin: S3Origin | LocalOrigin
        if model.source.startswith("s3://"):
            location = parse_s3_uri(model.source)
            origin = S3Origin(self._storage_for(location, spec), location)
            listing, before = listings[name], previous.get(name)
        else:
            origin = LocalOrigin(Path(model.source))
            listing = before = list_local(name, Path(model.source))  # local directories count as complete
            self._local[name] = listing
        return materialise_model(
            self._cache, name, origin, listing, before, in_use, override, FETCH_ERRORS, force_name=True,
            died=self._died_versions(name),
        )


def _override(name: str, text: str, source: Path) -> ConfigText:
    """An override as config.pbtxt text with the name forced to the model's; raises ConfigError if bad."""
    config = parse_config_override(text, f"{source}: {name}.config_pbtxt")
    config.name = name
    rendered = text_format.MessageToString(config)
    return ConfigText(rendered, "override:" + hashlib.sha256(rendered.encode()).hexdigest()[:32])
