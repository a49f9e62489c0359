"""`GET /v2/repository/status`'s `models`: versions found in storage, merged over sources and local roots."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from ensemble_runtime.inference import InferRequest, InferResponse
from ensemble_runtime.model_manager import ModelManager
from ensemble_runtime.registry import Registry
from ensemble_runtime.repository.remote import ModelListing, VersionListing
from ensemble_runtime.repository.sources import SyncReport, versions_of
from ensemble_runtime.repository_plane import RepositoryPlane
from ensemble_runtime.storage import Storage, merge_versions
from ensemble_runtime.version_loader import VersionLoader


class ListedSource:
    """A source whose last listing is given; its cache root holds a model the listing no longer shows."""

    def __init__(self, root: Path, found: dict[str, list[int]]) -> None:
        self.root = root
        self._found = found
        self.config_digest: str | None = None

    async def sync(
        self, models: Collection[str] | None = None, in_use: Collection[tuple[str, int]] = (), *, settle: bool = False
    ) -> SyncReport:
        return SyncReport()

    def found_versions(self) -> dict[str, list[int]]:
        return self._found


async def no_calls(request: InferRequest) -> InferResponse:
    raise AssertionError("no model is called")


def test_versions_of_lists_every_version_folder() -> None:
    listing = ModelListing("m", versions={3: VersionListing(3, ()), 1: VersionListing(1, ())})
    assert versions_of({"m": listing, "empty": ModelListing("empty")}) == {"m": [1, 3], "empty": []}


def test_merge_versions_unions_per_model() -> None:
    assert merge_versions([{"b": [2], "a": [3, 1]}, {"a": [2, 3]}, {}]) == {"a": [1, 2, 3], "b": [2]}


def test_storage_status_models_merge_sources_and_local_roots(tmp_path: Path) -> None:
    local, cache = tmp_path / "local", tmp_path / "cache"
    for folder in (local / "plain" / "1", local / "plain" / "4", local / "plain" / "notes", cache / "stale" / "7"):
        folder.mkdir(parents=True)
    registry = Registry()
    storage = Storage([ListedSource(cache, {"remote": [1, 2]})], registry)
    manager = ModelManager(roots=[local, cache], registry=registry, loader=VersionLoader(backends={}, caller=no_calls))
    plane = RepositoryPlane(manager=manager, storage=storage)
    # the cache's own folders are not storage: only what the source listed counts
    assert plane.storage_status().models == {"plain": [1, 4], "remote": [1, 2]}
