"""repository.json rendered from an Ensemble and its Models (the schema is ensemble_contract.repository)."""

from __future__ import annotations

from collections.abc import Mapping

from ensemble_contract.repository import RepositoryConfig, RepositoryEnsemble, RepositoryModel, S3Settings

from ..api.v1alpha1 import Ensemble, Model
from .pbtxt import ensemble_config, model_config

__all__ = ["RepositoryConfig", "render_repository_config"]


def render_repository_config(ensemble: Ensemble, models: Mapping[str, Model]) -> RepositoryConfig:
    """Models referenced by the ensemble's steps (each once, sorted by name) and the ensemble itself."""
    names = sorted({step.model_ref.name for step in ensemble.spec.steps if step.model_ref.name in models})
    s3: S3Settings | None = None
    entries: list[RepositoryModel] = []
    for name in names:
        spec = models[name].spec
        entries.append(RepositoryModel(name=name, source=spec.source, config_pbtxt=model_config(name, spec)))
        if spec.s3 is not None and s3 is None and (spec.s3.endpoint_url or spec.s3.region):
            s3 = S3Settings(endpoint_url=spec.s3.endpoint_url, region=spec.s3.region)
    return RepositoryConfig(
        models=entries,
        ensembles=[
            RepositoryEnsemble(
                name=ensemble.metadata.name,
                config_pbtxt=ensemble_config(ensemble.metadata.name, ensemble.spec),
            )
        ],
        s3=s3,
    )
