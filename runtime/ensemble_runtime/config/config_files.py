"""`config.pbtxt` files parsed once per version of the file, in a worker thread, within a size limit.

A file is known by its identity (size, mtime_ns, inode): a poll that finds it unchanged reuses the parse. Parsing
is pure Python (protobuf's text_format) and takes about a second per MiB, so `refresh` does it off the event
loop; `read` serves from what `refresh` parsed and only parses itself for a file that changed in between.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.model_config import ConfigError, parse_config_text

DEFAULT_MAX_CONFIG_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class FileIdentity:
    size: int
    mtime_ns: int
    inode: int


def identity_of(path: Path) -> FileIdentity | None:
    """The file's identity, or None when there is no regular file there."""
    try:
        stat = path.stat()
    except OSError:
        return None
    if not path.is_file():
        return None
    return FileIdentity(stat.st_size, stat.st_mtime_ns, stat.st_ino)


@dataclass(frozen=True, slots=True)
class _Parsed:
    identity: FileIdentity
    config: mc.ModelConfig | None  # None: `error` says why not
    error: str = ""


@dataclass
class ConfigFiles:
    """Parsed configs by path. Callers must not modify a config they get (copy it first, as apply_defaults does)."""

    max_bytes: int = DEFAULT_MAX_CONFIG_BYTES
    _parsed: dict[Path, _Parsed] = field(default_factory=dict)

    def read(self, path: Path) -> mc.ModelConfig | None:
        """The config at `path` (None when there is no file); raises ConfigError when it cannot be used."""
        identity = identity_of(path)
        if identity is None:
            self._parsed.pop(path, None)
            return None
        parsed = self._parsed.get(path)
        if parsed is None or parsed.identity != identity:
            parsed = self._parsed[path] = self._parse(path, identity)
        if parsed.config is None:
            raise ConfigError(parsed.error)
        return parsed.config

    async def refresh(self, paths: Iterable[Path]) -> None:
        """Parse, in a worker thread, each of `paths` that is new or changed; forget files not among them."""
        wanted = set(paths)
        for gone in set(self._parsed) - wanted:
            del self._parsed[gone]
        stale: list[tuple[Path, FileIdentity]] = []
        for path in sorted(wanted):
            identity = identity_of(path)
            parsed = self._parsed.get(path)
            if identity is None:
                self._parsed.pop(path, None)
            elif parsed is None or parsed.identity != identity:
                stale.append((path, identity))
        if stale:
            results = await asyncio.to_thread(lambda: [self._parse(p, i) for p, i in stale])
            for (path, _), parsed in zip(stale, results, strict=True):
                self._parsed[path] = parsed

    def _parse(self, path: Path, identity: FileIdentity) -> _Parsed:
        if identity.size > self.max_bytes:
            return _Parsed(identity, None, (
                f"{path}: {identity.size} bytes, over the limit of {self.max_bytes} bytes for a model "
                "configuration (--max-config-bytes)"
            ))
        try:
            with open(path, "rb") as file:
                raw = file.read(self.max_bytes + 1)
            if len(raw) > self.max_bytes:  # grew since it was looked at
                raise ConfigError(f"{path}: over the limit of {self.max_bytes} bytes (--max-config-bytes)")
            return _Parsed(identity, parse_config_text(raw.decode("utf-8"), str(path)))
        except ConfigError as exc:
            return _Parsed(identity, None, str(exc))
        except (OSError, UnicodeDecodeError) as exc:
            return _Parsed(identity, None, f"{path}: cannot read: {exc}")
