"""tools/image-archive.py writes a docker-archive (what `ctr images import` reads) of one static binary."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import tarfile
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[3] / "tools" / "image-archive.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("image_archive", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def members(data: bytes) -> dict[str, tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: (m, tar.extractfile(m).read()) for m in tar.getmembers()}  # type: ignore[union-attr]


def test_archive_holds_the_binary_as_entrypoint_run_by_the_user() -> None:
    archive = load_script().docker_archive(b"\x7fELF-binary", "pause", "registry.k8s.io/pause:3.10", "65535", [])
    files = members(archive)
    (manifest,) = json.loads(files["manifest.json"][1])
    assert manifest["RepoTags"] == ["registry.k8s.io/pause:3.10"]
    config_bytes = files[manifest["Config"]][1]
    assert manifest["Config"] == f"{hashlib.sha256(config_bytes).hexdigest()}.json"
    config = json.loads(config_bytes)
    assert config["config"]["User"] == "65535"
    assert config["config"]["Entrypoint"] == ["/pause"]
    (layer_name,) = manifest["Layers"]
    layer = files[layer_name][1]
    assert config["rootfs"]["diff_ids"] == [f"sha256:{hashlib.sha256(layer).hexdigest()}"]
    info, content = members(layer)["pause"]
    assert content == b"\x7fELF-binary"
    assert (info.mode, info.uid, info.mtime) == (0o755, 0, 0)


def test_same_inputs_give_the_same_bytes() -> None:
    script = load_script()
    first = script.docker_archive(b"binary", "echo", "ensemble.test/echo:1", "1000", ["--flag"])
    assert first == script.docker_archive(b"binary", "echo", "ensemble.test/echo:1", "1000", ["--flag"])
    assert first != script.docker_archive(b"binary", "echo", "ensemble.test/echo:1", "1001", ["--flag"])
