"""Local model repositories: one or more roots in Triton's layout."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

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
