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

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from ensemble_runtime.repository.policy import parse_version_dir
from ensemble_runtime.repository.remote import CONFIG_FILENAME, Manifest, ObjectInfo

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
