"""The local cache and materialisation, with local-directory origins (no S3 needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ensemble_runtime.repository.cache import ModelCache
from ensemble_runtime.repository.config_source import RepositoryConfigSource
from ensemble_runtime.repository.local import scan_roots
from ensemble_runtime.repository.remote import ObjectInfo
from ensemble_runtime.repository.sources import LocalOrigin, list_local
from ensemble_runtime.repository.sync import OriginError, materialise_model

CONFIG = 'name: "m"\nbackend: "python"\nversion_policy: { latest: { num_versions: 2 } }\n'
ENSEMBLE = 'name: "whatever"\nplatform: "ensemble"\n'


def write_model(root: Path, versions: dict[int, str], config: str | None = CONFIG) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (root / "config.pbtxt").write_text(config)
    for version, text in versions.items():
        (root / str(version)).mkdir(exist_ok=True)
        (root / str(version) / "model.py").write_text(text)
    return root


def sync_local(cache: ModelCache, src: Path, in_use: tuple[int, ...] = ()) -> tuple[bool, dict[str, str]]:
    listing = list_local("m", src)
    outcome = materialise_model(cache, "m", LocalOrigin(src), listing, listing, in_use)
    return outcome.changed, outcome.errors


def test_install_version_is_all_or_nothing(tmp_path: Path) -> None:
    cache = ModelCache(tmp_path / "cache")
    cache.prepare()

    def fail(staging: Path) -> None:
        (staging / "half.bin").write_bytes(b"x")
        raise OriginError("transfer broke")

    with pytest.raises(OriginError):
        cache.install_version("m", 1, (), fail)
    assert not (cache.root / "m" / "1").exists()
    assert list((cache.root / ".tmp").iterdir()) == []
    manifest = (ObjectInfo("half.bin", 1, "e"),)
    cache.install_version("m", 1, manifest, lambda staging: (staging / "half.bin").write_bytes(b"x"))
    assert cache.versions("m") == {1: manifest}
    cache.install_version("m", 1, (), lambda staging: None)  # replaced as a whole
    assert list((cache.root / "m" / "1").iterdir()) == [] and cache.versions("m") == {1: ()}


def test_materialise_policy_removal_and_in_use(tmp_path: Path) -> None:
    src = write_model(tmp_path / "src", {1: "v1", 2: "v2", 3: "v3"})
    cache = ModelCache(tmp_path / "cache")
    cache.prepare()
    assert sync_local(cache, src) == (True, {})
    assert sorted(scan_roots([cache.root])["m"].versions) == [2, 3]  # latest 2
    assert sync_local(cache, src) == (False, {})  # nothing to do the second time
    (src / "config.pbtxt").write_text(CONFIG.replace("latest: { num_versions: 2 }", "specific: { versions: [1] }"))
    changed, errors = sync_local(cache, src, in_use=(3,))
    assert changed and errors == {}
    assert sorted(scan_roots([cache.root])["m"].versions) == [1, 3]  # 3 is in use: kept for now
    assert sync_local(cache, src)[0]
    assert sorted(scan_roots([cache.root])["m"].versions) == [1]
    assert (cache.root / "m" / "1" / "model.py").read_text() == "v1"


def test_corrupt_config_keeps_cache(tmp_path: Path) -> None:
    src = write_model(tmp_path / "src", {1: "v1"})
    cache = ModelCache(tmp_path / "cache")
    cache.prepare()
    sync_local(cache, src)
    (src / "config.pbtxt").write_text("name: 'm'\nthis is { not pbtxt")
    changed, errors = sync_local(cache, src)
    assert not changed and "config.pbtxt" in errors["m"]
    assert cache.read_config("m") == CONFIG and (cache.root / "m" / "1" / "model.py").is_file()


def test_model_removed_when_not_in_use(tmp_path: Path) -> None:
    src = write_model(tmp_path / "src", {1: "v1"})
    cache = ModelCache(tmp_path / "cache")
    cache.prepare()
    sync_local(cache, src)
    outcome = materialise_model(cache, "m", LocalOrigin(src), None, None, in_use=(1,))
    assert not outcome.changed and (cache.root / "m" / "1").is_dir()
    outcome = materialise_model(cache, "m", LocalOrigin(src), None, None)
    assert outcome.changed and not (cache.root / "m").exists() and cache.models() == set()


@pytest.mark.asyncio
async def test_repository_config_source_local(tmp_path: Path) -> None:
    pre = write_model(tmp_path / "pre", {1: "pre"}, config=None)
    cls = write_model(tmp_path / "cls", {1: "c1", 2: "c2"}, config=CONFIG.replace('"m"', '"other"'))
    path = tmp_path / "repository.json"
    spec = {
        "models": [
            {"name": "pre", "source": str(pre), "config_pbtxt": 'backend: "python"\nname: "ignored"'},
            {"name": "cls", "source": str(cls), "config_pbtxt": 'backend: "python"'},
        ],
        "ensembles": [{"name": "pipe", "config_pbtxt": ENSEMBLE}],
    }
    path.write_text(json.dumps(spec))
    source = RepositoryConfigSource(path, tmp_path / "cache", settle_secs=0)
    report = await source.sync()
    assert report.error == "" and report.errors == {} and report.models_changed == {"pre", "cls", "pipe"}
    found = scan_roots([source.root])
    assert sorted(found) == ["cls", "pipe", "pre"]
    assert 'name: "pre"' in (source.root / "pre" / "config.pbtxt").read_text()  # name forced
    assert sorted(found["cls"].versions) == [2]  # the override has the default policy: latest 1
    assert list(found["pipe"].versions) == [1] and 'name: "pipe"' in (source.root / "pipe" / "config.pbtxt").read_text()
    assert source.found_versions() == {"pre": [1], "cls": [1, 2]}  # in the directories, not only what loads

    path.write_text("{not json")
    report = await source.sync()
    assert str(path) in report.error and "malformed JSON" in report.error and not report.changed
    assert sorted(scan_roots([source.root])) == ["cls", "pipe", "pre"]

    spec["models"] = spec["models"][:1]
    path.write_text(json.dumps(spec))
    report = await source.sync(in_use=[("cls", 2)])
    assert report.error == "" and (source.root / "cls" / "2").is_dir()  # dropped but in use
    report = await source.sync()
    assert report.models_changed == {"cls"} and sorted(scan_roots([source.root])) == ["pipe", "pre"]
    assert source.found_versions() == {"pre": [1]}


@pytest.mark.asyncio
async def test_repository_config_source_bad_override(tmp_path: Path) -> None:
    src = write_model(tmp_path / "m", {1: "v1"})
    path = tmp_path / "repository.json"
    path.write_text(json.dumps({"models": [{"name": "m", "source": str(src), "config_pbtxt": "nonsense {"}]}))
    report = await RepositoryConfigSource(path, tmp_path / "cache", settle_secs=0).sync()
    assert report.error == "" and "m.config_pbtxt" in report.errors["m"] and not report.changed
