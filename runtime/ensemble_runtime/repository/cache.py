"""The local cache a remote repository is materialised into, in Triton's layout.

    <root>/<model>/config.pbtxt
    <root>/<model>/<version>/...          complete versions only, each put in place with one rename
    <root>/.tmp/                          staging: a version is filled here, then renamed into place
    <root>/.state/<model>.json            what each cached file came from (config tag, per-version manifest)

The manager scans `<root>` like any local repository (it skips names starting with '.'). A version directory
without a manifest entry (a crash between the rename and the state write) is treated as unknown: replaced
when wanted, removed when not.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.model_config import ConfigError, apply_defaults, is_ensemble, parse_config_text
from ensemble_runtime.repository.policy import parse_version_dir
from ensemble_runtime.repository.remote import (
    CONFIG_FILENAME,
    Manifest,
    ModelListing,
    ObjectInfo,
    complete_versions,
    removed_model_changes,
    version_changes,
)

TMP_DIR = ".tmp"
STATE_DIR = ".state"


class ModelCache:
    """One cache root. Different models may be written from different threads at once; one model may not."""

    def __init__(self, root: Path) -> None:
        self.root = root

    # --- layout ---------------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Create the root and clear staging left by an interrupted process."""
        self.root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.root / TMP_DIR, ignore_errors=True)
        (self.root / TMP_DIR).mkdir(exist_ok=True)
        (self.root / STATE_DIR).mkdir(exist_ok=True)

    def model_dir(self, name: str) -> Path:
        _check_name(name)
        return self.root / name

    def models(self) -> set[str]:
        if not self.root.is_dir():
            return set()
        return {child.name for child in self.root.iterdir() if child.is_dir() and not child.name.startswith(".")}

    def versions(self, name: str) -> dict[int, Manifest | None]:
        """The version folders of `name` in the cache, each with the manifest it was downloaded with."""
        directory = self.model_dir(name)
        if not directory.is_dir():
            return {}
        table = self._read_state(name).get("versions")
        known: dict[str, object] = table if isinstance(table, dict) else {}
        out: dict[int, Manifest | None] = {}
        for child in directory.iterdir():
            version = parse_version_dir(child.name) if child.is_dir() else None
            if version is not None:
                entry = known.get(str(version))
                out[version] = _manifest_from_json(entry) if entry is not None else None
        return out

    # --- config ---------------------------------------------------------------------------------------

    def config_tag(self, name: str) -> str | None:
        """What the cached config.pbtxt was made from (an ETag, or a digest of an override); None if none."""
        if not (self.model_dir(name) / CONFIG_FILENAME).is_file():
            return None
        tag = self._read_state(name).get("config")
        return tag if isinstance(tag, str) else None

    def read_config(self, name: str) -> str | None:
        path = self.model_dir(name) / CONFIG_FILENAME
        return path.read_text(encoding="utf-8") if path.is_file() else None

    def write_config(self, name: str, text: str, tag: str) -> None:
        directory = self.model_dir(name)
        directory.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=self.root / TMP_DIR, prefix=f"{name}.config.")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(partial, directory / CONFIG_FILENAME)
        self._set_config_tag(name, tag)

    def remove_config(self, name: str) -> None:
        (self.model_dir(name) / CONFIG_FILENAME).unlink(missing_ok=True)
        self._set_config_tag(name, None)

    # --- versions -------------------------------------------------------------------------------------

    def install_version(self, name: str, version: int, manifest: Manifest, fill: Callable[[Path], object]) -> None:
        """Fill a staging directory with `fill(staging)`, then rename it to `<model>/<version>` as a whole.

        If `fill` raises, the staging directory is removed and the cache is as it was.
        """
        target = self.model_dir(name) / str(version)
        staging = Path(tempfile.mkdtemp(dir=self.root / TMP_DIR, prefix=f"{name}.{version}."))
        try:
            fill(staging)
            staging.chmod(0o755)
            target.parent.mkdir(parents=True, exist_ok=True)
            self._swap_in(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        self._set_version(name, version, manifest)

    def ensure_empty_version(self, name: str, version: int) -> bool:
        """Create `<model>/<version>/` (an ensemble's); True if it was not there."""
        target = self.model_dir(name) / str(version)
        if target.is_dir():
            return False
        target.mkdir(parents=True)
        self._set_version(name, version, ())
        return True

    def remove_version(self, name: str, version: int) -> None:
        target = self.model_dir(name) / str(version)
        if target.exists():
            trash = Path(tempfile.mkdtemp(dir=self.root / TMP_DIR, prefix=f"{name}.{version}.removed."))
            os.rename(target, trash / "v")  # out of the manager's sight in one step
            shutil.rmtree(trash, ignore_errors=True)
        self._set_version(name, version, None)

    def remove_model_if_empty(self, name: str) -> bool:
        """Remove `<model>/` (config included) once no version folder is left; True if removed."""
        directory = self.model_dir(name)
        if self.versions(name):
            return False
        if directory.exists():
            trash = Path(tempfile.mkdtemp(dir=self.root / TMP_DIR, prefix=f"{name}.removed."))
            os.rename(directory, trash / "m")
            shutil.rmtree(trash, ignore_errors=True)
        (self.root / STATE_DIR / f"{name}.json").unlink(missing_ok=True)
        return True

    def _swap_in(self, staging: Path, target: Path) -> None:
        if not target.exists():
            os.rename(staging, target)
            return
        trash = Path(tempfile.mkdtemp(dir=self.root / TMP_DIR, prefix=f"{target.parent.name}.replaced."))
        os.rename(target, trash / "old")
        os.rename(staging, target)
        shutil.rmtree(trash, ignore_errors=True)

    # --- state ----------------------------------------------------------------------------------------

    def _state_path(self, name: str) -> Path:
        return self.root / STATE_DIR / f"{name}.json"

    def _read_state(self, name: str) -> dict[str, object]:
        try:
            data = json.loads(self._state_path(name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _set_config_tag(self, name: str, tag: str | None) -> None:
        state = self._read_state(name)
        state["config"] = tag
        self._write_state(name, state)

    def _set_version(self, name: str, version: int, manifest: Manifest | None) -> None:
        state = self._read_state(name)
        versions = state.get("versions")
        table: dict[str, object] = dict(versions) if isinstance(versions, dict) else {}
        if manifest is None:
            table.pop(str(version), None)
        else:
            table[str(version)] = _manifest_to_json(manifest)
        state["versions"] = table
        self._write_state(name, state)

    def _write_state(self, name: str, state: dict[str, object]) -> None:
        path = self._state_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{name}.")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(state, handle, sort_keys=True)
        os.replace(partial, path)


def _check_name(name: str) -> None:
    if not name or "/" in name or name.startswith(".") or name != name.strip():
        raise ValueError(f"{name!r} is not a usable model name")


def _manifest_to_json(manifest: Iterable[ObjectInfo]) -> list[list[object]]:
    return [[item.key, item.size, item.etag] for item in manifest]


def _manifest_from_json(entry: object) -> Manifest | None:
    if not isinstance(entry, list):
        return None
    items: list[ObjectInfo] = []
    for row in entry:
        if not (isinstance(row, list) and len(row) == 3):
            return None
        key, size, etag = row
        if not (isinstance(key, str) and isinstance(size, int) and isinstance(etag, str)):
            return None
        items.append(ObjectInfo(key, size, etag))
    return tuple(sorted(items))


# --- materialising one model ----------------------------------------------------------------------------


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
) -> ModelOutcome:
    """Bring `<cache>/<name>` in line with `listing` (None: the model is gone). Blocking; never raises for
    errors of the origin (`fetch_errors`) or of the model's config: they are returned per model/version.

    `force_name`: a config naming another model is cached with its name replaced (the operator's file names
    models independently of their sources); otherwise such a config is an error, as in Triton."""
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
    changes = version_changes(listing, complete, cache.versions(name), policy, in_use, ensemble)
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
