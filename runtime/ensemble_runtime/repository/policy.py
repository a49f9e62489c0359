"""Triton's version policies as one pure function."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc


@dataclass(frozen=True, slots=True)
class VersionSelection:
    selected: tuple[int, ...]  # ascending
    missing: tuple[int, ...]  # asked for by a `specific` policy but not in the repository


def select_versions(policy: mc.ModelVersionPolicy, available: Iterable[int]) -> VersionSelection:
    """Versions to serve under `policy` given the versions present (Triton semantics).

    latest {num_versions: N}: the N numerically greatest (N defaults to 1);
    all: every version; specific {versions}: those listed, reporting listed ones that are absent.
    """
    present = sorted({v for v in available if v > 0})
    kind = policy.WhichOneof("policy_choice")
    if kind == "all":
        return VersionSelection(tuple(present), ())
    if kind == "specific":
        wanted = sorted(set(policy.specific.versions))
        have = set(present)
        return VersionSelection(tuple(v for v in wanted if v in have), tuple(v for v in wanted if v not in have))
    count = policy.latest.num_versions if kind == "latest" and policy.latest.num_versions > 0 else 1
    return VersionSelection(tuple(present[-count:]) if present else (), ())


def parse_version_dir(name: str) -> int | None:
    """Triton ignores version folders that are not numbers or that start with '0'."""
    if not name.isdigit() or name.startswith("0"):
        return None
    return int(name)
