"""Materialising one model into the local cache: apply what a sync changes (remote.version_changes) to a
`ModelCache`, fetching from an `Origin` (an S3 prefix, a local directory) and resolving the model's config.

Blocking; `sources.py` runs one model per worker thread.
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.model_config import ConfigError, apply_defaults, is_ensemble, parse_config_text
from ensemble_runtime.repository.cache import ModelCache
from ensemble_runtime.repository.remote import (
    CONFIG_FILENAME,
    Manifest,
    ModelListing,
    ObjectInfo,
    complete_versions,
    removed_model_changes,
    version_changes,
)


class Origin(Protocol):
    """Where one model's files come from (an S3 prefix, a local directory). Blocking calls."""

    @property
    def label(self) -> str:
        """For messages: "s3://bucket/models/pre", "/mnt/models/pre"."""
        ...

    def read(self, item: ObjectInfo) -> bytes:
        """The object `item` (key relative to the model folder), verified."""
        ...

    def fetch(self, item: ObjectInfo, dest: Path) -> None:
        """The object `item` (key relative to the model folder) into the file `dest`, verified."""
        ...


class OriginError(Exception):
    """An origin could not list or fetch; the message is reported as is."""


@dataclass(frozen=True, slots=True)
class ConfigText:
    text: str
    tag: str  # what it was made from: an ETag, or a digest of an override


@dataclass(slots=True)
class ModelOutcome:
    changed: bool = False
    errors: dict[str, str] = field(default_factory=dict)  # model or "model/version" -> reason
    awaited: tuple[int, ...] = ()  # versions still uploading that the policy will select (VersionChanges.awaited)


def materialise_model(
    cache: ModelCache,
    name: str,
    origin: Origin,
    listing: ModelListing | None,
    previous: ModelListing | None,
    in_use: Collection[int] = (),
    config_override: ConfigText | None = None,
    fetch_errors: tuple[type[BaseException], ...] = (OriginError,),
    force_name: bool = False,
    died: Collection[int] = (),
) -> ModelOutcome:
    """Bring `<cache>/<name>` in line with `listing` (None: the model is gone). Blocking; never raises for
    errors of the origin (`fetch_errors`) or of the model's config: they are returned per model/version.

    `force_name`: a config naming another model is cached with its name replaced (the operator's file names
    models independently of their sources); otherwise such a config is an error, as in Triton. `died`: the
    versions the load journal holds for this model (see version_changes)."""
    outcome = ModelOutcome()
    if listing is None or (listing.config is None and not listing.versions and config_override is None):
        _remove_model(cache, name, in_use, outcome)
        return outcome
    try:
        config, config_text = _resolve_config(cache, name, origin, listing, config_override, force_name)
    except ConfigError as exc:
        outcome.errors[name] = str(exc)
        return outcome  # what the cache holds for this model stays as it is
    except fetch_errors as exc:
        outcome.errors[name] = f"config.pbtxt: {exc}"
        return outcome
    policy = config.version_policy if config is not None else apply_defaults(mc.ModelConfig(), name).version_policy
    ensemble = config is not None and is_ensemble(config)
    complete = complete_versions(listing, previous)
    changes = version_changes(listing, complete, cache.versions(name), policy, in_use, ensemble, died)
    outcome.awaited = changes.awaited
    for version in changes.download:
        files = listing.versions[version].files
        try:
            cache.install_version(name, version, files, functools.partial(_fetch_all, origin, version, files))
            outcome.changed = True
        except fetch_errors as exc:
            outcome.errors[f"{name}/{version}"] = str(exc)
    for version in changes.missing:
        outcome.errors[f"{name}/{version}"] = (
            f"version {version} is named by the version policy but is not (completely) in {origin.label}"
        )
    if changes.empty_version and cache.ensure_empty_version(name, 1):
        outcome.changed = True
    if config_text is not None and cache.config_tag(name) != config_text.tag:
        cache.write_config(name, config_text.text, config_text.tag)
        outcome.changed = True
    elif config_text is None and cache.read_config(name) is not None:
        cache.remove_config(name)
        outcome.changed = True
    for version in changes.remove:
        cache.remove_version(name, version)
        outcome.changed = True
    return outcome


def _resolve_config(
    cache: ModelCache,
    name: str,
    origin: Origin,
    listing: ModelListing,
    override: ConfigText | None,
    force_name: bool,
) -> tuple[mc.ModelConfig | None, ConfigText | None]:
    """The model's config (with Triton's defaults) and the text to cache; raises ConfigError if it is bad."""
    if override is not None:
        text: ConfigText = override
    elif listing.config is None:
        return None, None
    elif cache.config_tag(name) == listing.config.etag and (cached := cache.read_config(name)) is not None:
        text = ConfigText(cached, listing.config.etag)
    else:
        raw = origin.read(listing.config)
        try:
            decoded = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{origin.label}/{CONFIG_FILENAME}: not UTF-8 text ({exc})") from None
        text = ConfigText(decoded, listing.config.etag)
    parsed = parse_config_text(text.text, f"{origin.label}/{CONFIG_FILENAME}")
    if parsed.name and parsed.name != name and force_name:
        parsed.name = name
        text = ConfigText(text_format.MessageToString(parsed), text.tag)
    elif parsed.name and parsed.name != name:
        raise ConfigError(
            f"{origin.label}/{CONFIG_FILENAME}: model name '{parsed.name}' does not match its directory '{name}'"
        )
    return apply_defaults(parsed, name), text


def _fetch_all(origin: Origin, version: int, files: Manifest, staging: Path) -> None:
    for item in files:
        dest = staging.joinpath(*item.key.split("/"))
        if not dest.resolve().is_relative_to(staging.resolve()):
            raise OriginError(f"{origin.label}: refusing key {item.key!r} outside the version folder")
        origin.fetch(ObjectInfo(f"{version}/{item.key}", item.size, item.etag), dest)


def _remove_model(cache: ModelCache, name: str, in_use: Collection[int], outcome: ModelOutcome) -> None:
    if name not in cache.models():
        return
    changes = removed_model_changes(cache.versions(name), in_use)
    for version in changes.remove:
        cache.remove_version(name, version)
        outcome.changed = True
    if not changes.kept_in_use and cache.remove_model_if_empty(name):
        outcome.changed = True
