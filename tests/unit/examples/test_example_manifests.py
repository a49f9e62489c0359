"""The five scenario manifests (examples/manifests/<scenario>/): valid operator objects, a valid ensemble graph,
and exactly the example repository's configs, so the runtime the operator configures serves what the tests
upload to s3://models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ensemble_examples.manifests import SCENARIOS, Scenario, resource_name, scenario_documents
from ensemble_examples.repository import model_names
from ensemble_operator.api.v1alpha1 import Ensemble, Model
from ensemble_operator.render.pbtxt import ensemble_config, model_config
from ensemble_operator.render.runtime_config import render_repository_config
from ensemble_operator.validation import validate_ensemble
from ensemble_runtime.config.model_config import apply_defaults, check_config
from ensemble_runtime.ensemble.graph import build_graph
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tests.unit.examples.test_new_pipelines import parse

FOLDERS = sorted(SCENARIOS)
KIND = mc.ModelInstanceGroup


def objects(folder: str) -> tuple[dict[str, Model], Ensemble, list[dict[str, Any]]]:
    docs = scenario_documents(folder)
    models = {d["metadata"]["name"]: Model.model_validate(d) for d in docs if d["kind"] == "Model"}
    (ensemble,) = [Ensemble.model_validate(d) for d in docs if d["kind"] == "Ensemble"]
    return models, ensemble, docs


def pbtxt(text: str) -> mc.ModelConfig:
    config = mc.ModelConfig()
    text_format.Parse(text, config)
    return config


def repository_name(model: Model) -> str:
    return model.spec.source.removeprefix("s3://models/")


def test_every_scenario_has_a_folder() -> None:
    root = Path(__file__).resolve().parents[3] / "examples" / "manifests"
    assert set(FOLDERS) <= {p.name for p in root.iterdir() if p.is_dir()}
    for folder in FOLDERS:
        assert sorted(p.name for p in (root / folder).iterdir()) == ["ensemble.yaml", "models.yaml"]


@pytest.mark.parametrize("folder", FOLDERS)
def test_manifests_load_and_the_graph_validates(folder: str) -> None:
    models, ensemble, docs = objects(folder)
    scenario = SCENARIOS[folder]
    assert [d["kind"] for d in docs] == ["Secret", *["Model"] * len(models), "Ensemble"]
    assert ensemble.metadata.name == scenario.ensemble
    assert {step.model_ref.name for step in ensemble.spec.steps} == set(models)
    issues = validate_ensemble(ensemble.spec, models)
    assert issues == [], [i.message for i in issues]
    secret = docs[0]["metadata"]["name"]
    for model in models.values():
        assert model.spec.s3 is not None and model.spec.s3.secret_ref is not None
        assert model.spec.s3.secret_ref.name == secret


@pytest.mark.parametrize("folder", FOLDERS)
def test_each_model_is_its_repository_config(folder: str, example_repo: Path) -> None:
    models, _, _ = objects(folder)
    for name, model in models.items():
        source = repository_name(model)
        assert source in model_names() and resource_name(source) == name
        repository = apply_defaults(parse(example_repo, source), source)
        rendered = apply_defaults(pbtxt(model_config(name, model.spec)), name)
        for field in ("platform", "backend", "max_batch_size", "input", "output", "parameters", "dynamic_batching"):
            assert getattr(rendered, field) == getattr(repository, field), (name, field)
        groups = [(g.kind, g.count) for g in rendered.instance_group]
        expected = [(g.kind, g.count) for g in repository.instance_group]
        if groups != expected:  # the only difference allowed: ONNX models placed on the GPU the pod asks for
            assert SCENARIOS[folder].gpu and rendered.platform == "onnxruntime_onnx", name
            assert groups == [(KIND.KIND_GPU, count) for _, count in expected], name


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_ensemble_is_its_repository_config(folder: str, example_repo: Path) -> None:
    _, ensemble, _ = objects(folder)
    scenario = SCENARIOS[folder]
    rendered = pbtxt(ensemble_config(scenario.repository_ensemble, ensemble.spec))
    for step in rendered.ensemble_scheduling.step:
        step.model_name = step.model_name.replace("-", "_")
    assert rendered == parse(example_repo, scenario.repository_ensemble)


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_runtime_accepts_what_the_operator_renders(folder: str) -> None:
    """The repository.json the operator writes: every config passes the runtime's checks, the graph builds."""
    models, ensemble, _ = objects(folder)
    rendered = render_repository_config(ensemble, models)
    configs = {entry.name: pbtxt(entry.config_pbtxt or "") for entry in rendered.models}
    for name, config in configs.items():
        check_config(apply_defaults(config, name), name)
    (entry,) = rendered.ensembles
    config = pbtxt(entry.config_pbtxt)
    graph = build_graph(config, configs, {name: [1] for name in configs})
    assert graph.step_models() == set(models)
    assert rendered.s3 is not None and rendered.s3.endpoint_url == "http://minio.storage.svc:9000"


@pytest.mark.parametrize("folder", FOLDERS)
def test_replicas_and_placement(folder: str) -> None:
    models, ensemble, _ = objects(folder)
    scenario: Scenario = SCENARIOS[folder]
    assert ensemble.spec.replicas == 2
    resources = ensemble.spec.resources
    assert resources is not None
    gpus = [resources.requests.get("nvidia.com/gpu"), resources.limits.get("nvidia.com/gpu")]
    assert gpus == ([1, 1] if scenario.gpu else [None, None])
    kinds = {group.kind for model in models.values() for group in model.spec.instance_groups}
    assert ("KIND_GPU" in kinds) == scenario.gpu
    if folder == "text":
        (group,) = models["tokenizer"].spec.instance_groups
        assert (group.kind, group.count) == ("KIND_CPU", 4)


def test_models_shared_between_scenarios_are_identical() -> None:
    seen: dict[str, tuple[str, dict[str, Any]]] = {}
    for folder in FOLDERS:
        for doc in scenario_documents(folder):
            key = f"{doc['kind']}/{doc['metadata']['name']}"
            if key in seen and doc["kind"] != "Ensemble":
                assert doc == seen[key][1], f"{key} differs between {seen[key][0]} and {folder}"
            seen.setdefault(key, (folder, doc))
    assert "Model/image-preprocess" in seen and "Model/classifier-a" in seen


def test_scenario_documents_point_at_another_s3() -> None:
    docs = scenario_documents("ocr", s3_endpoint_url="http://127.0.0.1:9123", access_key_id="k", secret_access_key="s")
    assert {d["spec"]["s3"]["endpointUrl"] for d in docs if d["kind"] == "Model"} == {"http://127.0.0.1:9123"}
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    assert secret["stringData"] == {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    assert scenario_documents("ocr") != docs  # a fresh read each time
    with pytest.raises(KeyError, match="unknown scenario"):
        scenario_documents("audio")
