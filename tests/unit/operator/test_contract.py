"""Operator and runtime exchange what ensemble_contract describes: what one side writes, the other reads back
unchanged (repository.json, the storage status, the ports)."""

from __future__ import annotations

import json

from ensemble_contract.ports import GRPC_PORT, HTTP_PORT, METRICS_PORT
from ensemble_contract.repository import RepositoryConfig
from ensemble_contract.status import SourceStatus, StorageStatus
from ensemble_operator.access import DEFAULT_ALLOWED_FLAGS
from ensemble_operator.api.v1alpha1 import Ensemble, Model
from ensemble_operator.plan import plan_ensemble
from ensemble_operator.render.common import RuntimeDefaults
from ensemble_operator.status import config_digest_of, found_versions, storage_problem
from ensemble_runtime.repository.remote import parse_repository_config
from ensemble_runtime.settings import RuntimeSettings, build_parser, parse_settings


def test_the_runtime_parses_the_rendered_repository_json_into_the_same_model(
    ensemble: Ensemble, models: dict[str, Model]
) -> None:
    objs = plan_ensemble(ensemble, models, RuntimeDefaults()).apply
    cm = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-repository"))
    text = cm["data"]["repository.json"]
    parsed = parse_repository_config(json.loads(text))
    assert isinstance(parsed, RepositoryConfig)
    assert parsed.to_json() == text
    assert parsed.names() == {ensemble.metadata.name} | {s.model_ref.name for s in ensemble.spec.steps}


def test_the_operator_decodes_the_status_the_runtime_produces() -> None:
    produced = StorageStatus(
        sources=[SourceStatus(source="s3://models/a", error="connection refused", failures=2)],
        reachable=False,
        models={"a": [3, 1], "b": []},
        uploading={"a": [4]},
        config_digest="ab" * 32,
    )
    wire = json.loads(json.dumps(produced.model_dump(mode="json")))  # what GET /v2/repository/status carries
    assert storage_problem(wire) == "s3://models/a: connection refused"
    assert found_versions(wire) == {"a": (1, 3), "b": ()}
    assert config_digest_of(wire) == "ab" * 32
    assert StorageStatus.model_validate(wire) == produced


def test_the_operator_points_at_the_ports_the_runtime_listens_on() -> None:
    for settings in (RuntimeSettings(), parse_settings(["--model-repository", "/models"])):
        assert (settings.http_port, settings.grpc_port, settings.metrics_port) == (HTTP_PORT, GRPC_PORT, METRICS_PORT)


def test_the_tunables_an_ensemble_may_pass_are_runtime_flags() -> None:
    known = build_parser()._option_string_actions  # the flags the runtime's parser takes, abbreviations aside
    assert [flag for flag in DEFAULT_ALLOWED_FLAGS if flag not in known] == []
