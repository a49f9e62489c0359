"""Poll mode's diff between the repository as scanned and what is served: real version directories on disk,
registry records as loading leaves them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ensemble_runtime.config.model_config import ConfigError
from ensemble_runtime.poll_changes import ReadConfig, changed_models, removed_models
from ensemble_runtime.registry import LoadedVersion, ModelRecord
from ensemble_runtime.repository.local import ModelLocation, version_fingerprint
from tritonclient.grpc import model_config_pb2 as mc


def python_config(name: str) -> mc.ModelConfig:
    return mc.ModelConfig(name=name, backend="python")


def ensemble_config(name: str, step: str) -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, platform="ensemble")
    config.ensemble_scheduling.step.add(model_name=step, model_version=-1)
    return config


def location(root: Path, name: str, *versions: int) -> ModelLocation:
    paths: dict[int, Path] = {}
    for version in versions:
        path = root / name / str(version)
        path.mkdir(parents=True, exist_ok=True)
        (path / "model.py").write_text(f"# {name} {version}\n")
        paths[version] = path
    return ModelLocation(name=name, path=root / name, versions=paths)


def served(loc: ModelLocation, config: mc.ModelConfig, *versions: int) -> ModelRecord:
    """A record serving `versions` of `loc` as loaded now (their fingerprints taken from the files)."""
    record = ModelRecord(name=loc.name, config=config, served=versions)
    for version in versions:
        record.versions[version] = LoadedVersion(
            loc.name, version, config, None, fingerprint=version_fingerprint(config, loc.versions[version])
        )
    return record


def reads(configs: dict[str, mc.ModelConfig]) -> ReadConfig:
    def read(loc: ModelLocation) -> mc.ModelConfig:
        if loc.name not in configs:
            raise ConfigError(f"no config for '{loc.name}'")
        return configs[loc.name]

    return read


def test_a_model_served_as_the_repository_holds_it_is_unchanged(tmp_path: Path) -> None:
    loc = location(tmp_path, "m", 1, 2)
    config = python_config("m")
    records = {"m": served(loc, config, 2)}  # latest 1: version 2
    assert changed_models({"m": loc}, records, lambda _: config) == []


def test_a_new_model_a_new_version_and_a_changed_file_are_changes(tmp_path: Path) -> None:
    config = python_config("a")
    a = location(tmp_path, "a", 1)
    b = location(tmp_path, "b", 1)
    c = location(tmp_path, "c", 1)
    records = {"a": served(a, config, 1), "c": served(c, config, 1)}
    a = location(tmp_path, "a", 1, 2)  # a: version 2 arrives
    model_file = c.versions[1] / "model.py"  # c: its file rewritten (a new size and time)
    model_file.write_text("# rewritten, longer than before\n")
    os.utime(model_file, ns=(1, 1))
    assert changed_models({"a": a, "b": b, "c": c}, records, lambda _: config) == ["a", "b", "c"]


def test_a_removed_version_and_a_failed_one_are_changes(tmp_path: Path) -> None:
    config = python_config("m")
    config.version_policy.all.SetInParent()
    loc = location(tmp_path, "m", 1, 2)
    gone = served(loc, config, 1, 2)
    only_one = ModelLocation("m", loc.path, {1: loc.versions[1]})
    assert changed_models({"m": only_one}, {"m": gone}, lambda _: config) == ["m"]
    failed = served(loc, config, 1)  # version 2 failed to load: not served, so it is tried again
    assert changed_models({"m": loc}, {"m": failed}, lambda _: config) == ["m"]


def test_a_config_that_no_longer_reads_is_a_change(tmp_path: Path) -> None:
    loc = location(tmp_path, "m", 1)
    records = {"m": served(loc, python_config("m"), 1)}
    assert changed_models({"m": loc}, records, reads({})) == ["m"]


def test_an_ensemble_changes_with_its_config_only(tmp_path: Path) -> None:
    loc = ModelLocation("e", tmp_path / "e")
    records = {"e": ModelRecord(name="e", config=ensemble_config("e", "a"), served=(1,))}
    assert changed_models({"e": loc}, records, lambda _: ensemble_config("e", "a")) == []
    assert changed_models({"e": loc}, records, lambda _: ensemble_config("e", "b")) == ["e"]


@pytest.mark.parametrize("in_repository", [True, False])
def test_a_model_unloaded_through_the_api_is_left_alone(tmp_path: Path, in_repository: bool) -> None:
    loc = location(tmp_path, "m", 1, 2)
    record = served(loc, python_config("m"), 1)
    record.explicitly_unloaded = True
    locations = {"m": loc} if in_repository else {}
    assert changed_models(locations, {"m": record}, lambda _: python_config("m")) == []
    assert removed_models(locations, {"m": record}) == []


def test_a_served_model_gone_from_the_repository_is_removed(tmp_path: Path) -> None:
    loc = location(tmp_path, "m", 1)
    records = {"m": served(loc, python_config("m"), 1), "failed": ModelRecord(name="failed")}
    assert removed_models({}, records) == ["m"]  # one that serves nothing has nothing to unload
    assert removed_models({"m": loc}, records) == []
