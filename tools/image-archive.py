#!/usr/bin/env python3
"""Write a one-layer `FROM scratch` container image as a docker-archive tarball, without a daemon.

    python3 tools/image-archive.py --binary out/pause --tag registry.k8s.io/pause:3.10 --user 65535 \\
        --out pause.tar

The layer holds one static executable at `/<name of the binary>` (mode 0755, owned by root, mtime 0); the
config runs it as the entrypoint under `--user`. The archive (manifest.json, the config JSON, the layer tar)
is what `docker save` writes and what `ctr images import` and `docker load` read. The same inputs give the
same bytes. Standard library only: build-tools.sh runs it with the system python3.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import tarfile
from pathlib import Path


def _tar_member(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def layer_tar(binary: bytes, name: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        _tar_member(tar, name, binary, 0o755)
    return buffer.getvalue()


def image_config(layer_digest: str, entrypoint: list[str], user: str, env: list[str]) -> bytes:
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {"User": user, "Entrypoint": entrypoint, "Env": env, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [
            {"created": "1970-01-01T00:00:00Z", "created_by": f"COPY {entrypoint[0]} (tools/image-archive.py)"}
        ],
    }
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def docker_archive(binary: bytes, name: str, tag: str, user: str, args: list[str]) -> bytes:
    layer = layer_tar(binary, name)
    layer_hex = hashlib.sha256(layer).hexdigest()
    config = image_config(f"sha256:{layer_hex}", [f"/{name}", *args], user, ["PATH=/"])
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": [f"{layer_hex}/layer.tar"]}]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        _tar_member(tar, config_name, config, 0o644)
        _tar_member(tar, f"{layer_hex}/layer.tar", layer, 0o644)
        _tar_member(tar, "manifest.json", json.dumps(manifest).encode(), 0o644)
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", type=Path, required=True, help="static executable, becomes /<its name>")
    parser.add_argument("--tag", required=True, help="image reference, e.g. registry.k8s.io/pause:3.10")
    parser.add_argument("--user", required=True, help="numeric uid (FROM scratch has no /etc/passwd)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("args", nargs="*", help="arguments appended to the entrypoint")
    ns = parser.parse_args()
    data = docker_archive(ns.binary.read_bytes(), ns.binary.name, ns.tag, ns.user, ns.args)
    ns.out.write_bytes(data)


if __name__ == "__main__":
    main()
