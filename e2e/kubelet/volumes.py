"""Pod volumes as directories under the pod's directory, kept in sync like the kubelet's volume manager.

Supported: emptyDir, hostPath, configMap, secret, downwardAPI and projected (configMap, secret,
downwardAPI, serviceAccountToken sources). ConfigMap/Secret/downward API contents are written the way the
kubelet's atomic writer does: a timestamped directory, a `..data` symlink switched atomically by rename,
and one symlink per top-level entry pointing into `..data`. `sync()` re-reads the sources and switches
`..data` when anything changed, so readers never see a half-written update.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from .api import JSON
from .objects import ConfigError, Objects, field_value
from .process import Mount

Files = dict[str, tuple[bytes, int]]  # relative path -> (content, mode)
DATA = "..data"


def atomic_write(root: Path, files: Files) -> bool:
    """Make `root` hold exactly `files`; False (and nothing touched) when it already does."""
    root.mkdir(parents=True, exist_ok=True)
    current = root / DATA
    if current.is_dir() and _read(current) == files:
        return False
    stamp = root / (time.strftime("..%Y_%m_%d_%H_%M_%S.") + str(time.monotonic_ns()))
    for rel, (content, mode) in files.items():
        path = stamp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        path.chmod(mode)
    stamp.mkdir(exist_ok=True)
    old = os.readlink(current) if current.is_symlink() else None
    tmp = root / "..data_tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(stamp.name)
    tmp.rename(current)
    top = {rel.split("/")[0] for rel in files}
    for entry in root.iterdir():
        if not entry.name.startswith("..") and entry.name not in top:
            entry.unlink()
    for name in top:
        link = root / name
        if not link.is_symlink():
            link.symlink_to(f"{DATA}/{name}")
    if old is not None:
        shutil.rmtree(root / old, ignore_errors=True)
    return True


def _read(directory: Path) -> Files:
    out: Files = {}
    for path in directory.rglob("*"):
        if path.is_file():
            out[str(path.relative_to(directory))] = (path.read_bytes(), path.stat().st_mode & 0o777)
    return out


class PodVolumes:
    """The volumes of one pod, materialised under `<pod_dir>/volumes/<name>`."""

    def __init__(self, pod: JSON, pod_dir: Path, objects: Objects, pod_ip: str, host_ip: str) -> None:
        self._pod = pod
        self._root = pod_dir / "volumes"
        self._objects = objects
        self._pod_ip, self._host_ip = pod_ip, host_ip
        self._tokens: dict[tuple[str | None, int], str] = {}
        self._paths: dict[str, Path] = {}

    def update(self, pod: JSON) -> None:
        self._pod = pod  # labels/annotations feed downward API volumes

    def setup(self) -> None:
        """Create every volume; `ConfigError` if a required ConfigMap/Secret (or key) is missing."""
        for volume in self._pod["spec"].get("volumes") or []:
            self._paths[volume["name"]] = self._create(volume)
        self.sync(strict=True)

    def _create(self, volume: JSON) -> Path:
        name: str = volume["name"]
        if "hostPath" in volume:
            path = Path(volume["hostPath"]["path"])
            if volume["hostPath"].get("type") == "DirectoryOrCreate":
                path.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                raise ConfigError(f"hostPath {path} does not exist")
            return path
        kinds = ("emptyDir", "configMap", "secret", "downwardAPI", "projected")
        if not any(kind in volume for kind in kinds):
            raise ConfigError(f"volume {name}: unsupported type {sorted(volume)}")
        path = self._root / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def sync(self, strict: bool = False) -> None:
        """Rewrite ConfigMap/Secret/downward API volumes whose sources changed. A source that disappeared
        leaves the volume as it was (as kubelet does), unless `strict` (at setup)."""
        for volume in self._pod["spec"].get("volumes") or []:
            if not any(k in volume for k in ("configMap", "secret", "downwardAPI", "projected")):
                continue
            try:
                files = self._files(volume)
            except ConfigError:
                if strict:
                    raise
                continue
            atomic_write(self._paths[volume["name"]], files)

    def _files(self, volume: JSON) -> Files:
        if "projected" in volume:
            projected = volume["projected"]
            files: Files = {}
            for source in projected.get("sources") or []:
                files.update(self._source_files(source, projected.get("defaultMode", 0o644)))
            return files
        kind = next(k for k in ("configMap", "secret", "downwardAPI") if k in volume)
        return self._source_files(volume, volume[kind].get("defaultMode", 0o644))

    def _source_files(self, source: JSON, default_mode: int) -> Files:
        namespace = self._pod["metadata"]["namespace"]
        for kind in ("configMap", "secret"):
            if kind in source:
                spec = source[kind]
                name = spec.get("name") or spec.get("secretName")
                data = self._objects.source(kind, namespace, name, bool(spec.get("optional")))
                return _select(data, spec.get("items"), spec.get("defaultMode", default_mode), kind, name)
        if "downwardAPI" in source:
            files: Files = {}
            for item in source["downwardAPI"].get("items") or []:
                if "fieldRef" not in item:
                    raise ConfigError(f"downwardAPI item {item['path']}: only fieldRef is supported")
                value = field_value(self._pod, item["fieldRef"]["fieldPath"], self._pod_ip, self._host_ip)
                files[item["path"]] = (value.encode(), item.get("mode", default_mode))
            return files
        if "serviceAccountToken" in source:
            spec = source["serviceAccountToken"]
            key = (spec.get("audience"), int(spec.get("expirationSeconds", 3607)))
            if key not in self._tokens:
                self._tokens[key] = self._objects.service_account_token(self._pod, *key)
            return {spec["path"]: (self._tokens[key].encode(), default_mode)}
        raise ConfigError(f"unsupported projected source {sorted(source)}")

    def mounts(self, container: JSON) -> list[Mount]:
        """The container's volumeMounts as bind mounts (subPath binds that path inside the volume)."""
        out: list[Mount] = []
        for mount in container.get("volumeMounts") or []:
            source = self._paths[mount["name"]]
            if mount.get("subPath"):
                source = source / mount["subPath"]
                if not source.exists():
                    source.mkdir(parents=True, exist_ok=True)
            out.append(Mount(source.resolve(), mount["mountPath"], bool(mount.get("readOnly"))))
        return out


def _select(data: dict[str, bytes], items: list[JSON] | None, mode: int, kind: str, name: str) -> Files:
    if not items:
        return {key: (value, mode) for key, value in data.items()}
    files: Files = {}
    for item in items:
        if item["key"] not in data:
            raise ConfigError(f'key "{item["key"]}" not found in {kind} "{name}"')
        files[item["path"]] = (data[item["key"]], item.get("mode", mode))
    return files
