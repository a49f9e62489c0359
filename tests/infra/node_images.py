"""Test images for the real node: one static Go program in a FROM-scratch image, cached by source hash.

    tar = static_image(Path("tests/integration/node/images/echo"), "echo", "ensemble.test/echo:1", uid=1000)

`tools/build-static-image.sh` does the building (the same way it builds the pause image); this caches the
result beside the tools, in `<tools cache>/image-<name>-<hash of sources, tag, uid>/image.tar`, built under a lock
into a temporary directory renamed into place.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.infra.tools import REPO_ROOT, ToolLocator

BUILDER = REPO_ROOT / "tools" / "build-static-image.sh"


@dataclass(frozen=True)
class ImageArchive:
    """An image tarball and the reference it is tagged with."""

    path: Path
    tag: str


def static_image(src: Path, name: str, tag: str, *, uid: int, locator: ToolLocator | None = None) -> ImageArchive:
    locator = locator or ToolLocator.from_env()
    cache = locator.tool_dir("pause").parent
    source_hash = subprocess.run(
        ["bash", str(BUILDER), "hash", str(src)], capture_output=True, text=True, check=True
    ).stdout.strip()
    key = hashlib.sha256(f"{source_hash} {tag} {uid}".encode()).hexdigest()[:16]
    final = cache / f"image-{name}-{key}"
    archive = ImageArchive(final / "image.tar", tag)
    if final.is_dir():
        return archive
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / f".image-{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if final.is_dir():
            return archive
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-image-{name}.", dir=cache))
        try:
            subprocess.run(
                ["bash", str(BUILDER), "build", str(src), name, tag, str(uid), str(tmp)],
                capture_output=True,
                text=True,
                check=True,
            )
            os.chmod(tmp, 0o755)
            tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return archive
