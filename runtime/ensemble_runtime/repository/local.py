"""Local model repositories: one or more roots in Triton's layout."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.model_config import ConfigError
from ensemble_runtime.repository.policy import parse_version_dir


@dataclass(frozen=True, slots=True)
class ModelLocation:
    name: str
    path: Path
    versions: dict[int, Path] = field(default_factory=dict)
    error: str = ""  # set when the layout itself is wrong (e.g. the name appears in two roots)


def scan_model_dir(name: str, path: Path) -> ModelLocation:
    versions: dict[int, Path] = {}
    for child in sorted(path.iterdir()):
        if child.is_dir():
            version = parse_version_dir(child.name)
            if version is not None:
                versions[version] = child
    return ModelLocation(name=name, path=path, versions=versions)


def scan_roots(roots: Sequence[Path]) -> dict[str, ModelLocation]:
    """Every model directory under the roots; a name found in two roots is reported, not guessed."""
    found: dict[str, ModelLocation] = {}
    for root in roots:
        if not root.is_dir():
            continue
        for child in sorted(root.iterdir()):
            if not child.is_dir() or child.name.startswith("."):
                continue
            if child.name in found:
                first = found[child.name].path
                found[child.name] = ModelLocation(
                    name=child.name,
                    path=first,
                    error=f"model '{child.name}' appears in two repositories: {first.parent} and {root}",
                )
                continue
            found[child.name] = scan_model_dir(child.name, child)
    return found


def infer_platform(location: ModelLocation) -> mc.ModelConfig:
    """A model without config.pbtxt: pick the backend from the model file, as Triton's autocomplete does."""
    config = mc.ModelConfig()
    for version_path in sorted(location.versions.values(), reverse=True):
        if (version_path / "model.onnx").exists():
            config.platform = "onnxruntime_onnx"
            return config
        if (version_path / "model.plan").exists():
            config.platform = "tensorrt_plan"
            return config
        if (version_path / "model.py").exists():
            config.backend = "python"
            return config
    raise ConfigError(f"model '{location.name}': no config.pbtxt and no model file to infer a backend from")


def version_fingerprint(config: mc.ModelConfig, path: Path) -> str:
    """Identity of one version as loaded: its config and every file's name, size and modification time."""
    digest = hashlib.sha256(config.SerializeToString(deterministic=True))
    for item in sorted(path.rglob("*")):
        if item.is_file():
            stat = item.stat()
            digest.update(f"{item.relative_to(path)}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]
