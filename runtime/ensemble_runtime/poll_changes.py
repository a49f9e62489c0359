"""Poll mode's question: which models must the repository poll reload or unload, comparing what the repository
holds now with what is served. Pure over the scanned locations and the registry's records (the config is read
through the caller's function)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.model_config import ConfigError, is_ensemble
from ensemble_runtime.registry import ModelRecord
from ensemble_runtime.repository.local import ModelLocation, version_fingerprint
from ensemble_runtime.repository.policy import select_versions

ReadConfig = Callable[[ModelLocation], mc.ModelConfig]  # raises ConfigError for a config that cannot serve


def changed_models(
    locations: Mapping[str, ModelLocation], records: Mapping[str, ModelRecord], read_config: ReadConfig
) -> list[str]:
    """Models in the repository whose content differs from what is served: new ones, ones whose config no longer
    reads (their load reports why), ensembles whose config changed, and models whose selected versions' files or
    config differ from the served versions' (new, changed or removed versions; failed ones are retried). A model
    unloaded through the API stays unloaded."""
    changed: list[str] = []
    for name, location in locations.items():
        rec = records.get(name)
        if rec is None:
            changed.append(name)
            continue
        if rec.explicitly_unloaded:
            continue
        try:
            config = read_config(location)
        except ConfigError:
            changed.append(name)
            continue
        if is_ensemble(config):
            if rec.config is None or rec.config.SerializeToString() != config.SerializeToString():
                changed.append(name)
            continue
        selection = select_versions(config.version_policy, location.versions)
        fingerprints = {v: version_fingerprint(config, location.versions[v]) for v in selection.selected}
        served = {v: rec.versions[v].fingerprint for v in rec.served if v in rec.versions}
        if fingerprints != served:
            changed.append(name)
    return changed


def removed_models(locations: Mapping[str, ModelLocation], records: Mapping[str, ModelRecord]) -> list[str]:
    """Served models whose directory is gone from every repository (poll mode unloads them); a model unloaded
    through the API is left alone."""
    return [
        name
        for name, rec in records.items()
        if name not in locations and rec.served and not rec.explicitly_unloaded
    ]
