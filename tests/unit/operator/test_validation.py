"""Table-driven tests of the ensemble graph checks."""

from __future__ import annotations

from typing import Any

import pytest
from ensemble_operator import validation as v
from ensemble_operator.api.v1alpha1 import EnsembleSpec, Model


def model(name: str, inputs: dict[str, Any], outputs: dict[str, Any], **spec: Any) -> Model:
    def tensors(d: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"name": n, "dataType": t, "dims": dims} for n, (t, dims) in d.items()]

    body = {"source": f"s3://bucket/models/{name}", "inputs": tensors(inputs), "outputs": tensors(outputs)}
    status = spec.pop("status", {})
    return Model.model_validate({"metadata": {"name": name}, "spec": {**body, **spec}, "status": status})


def step(
    name: str, model_name: str, inp: dict[str, str], out: dict[str, str], version: int = -1
) -> dict[str, Any]:
    return {
        "name": name,
        "modelRef": {"name": model_name},
        "modelVersion": version,
        "inputMap": inp,
        "outputMap": out,
    }


BASE_MODELS = {
    "pre": model("pre", {"RAW": ("UINT8", [-1])}, {"PIX": ("FP32", [3, 4])}, maxBatchSize=8),
    "cls": model("cls", {"x": ("TYPE_FP32", [3, -1])}, {"y": ("FP32", [10])}, maxBatchSize=8),
    "post": model("post", {"p": ("FP32", [10])}, {"label": ("BYTES", [1])}, maxBatchSize=8),
}
BASE_STEPS = [
    step("a", "pre", {"RAW": "raw"}, {"PIX": "pix"}),
    step("b", "cls", {"x": "pix"}, {"y": "logits"}),
    step("c", "post", {"p": "logits"}, {"label": "label"}),
]


def spec(steps: list[dict[str, Any]] | None = None, **extra: Any) -> EnsembleSpec:
    body: dict[str, Any] = {
        "maxBatchSize": 4,
        "inputs": [{"name": "raw", "dataType": "UINT8", "dims": [-1]}],
        "outputs": [{"name": "label", "dataType": "TYPE_STRING", "dims": [1]}],
        "steps": BASE_STEPS if steps is None else steps,
    }
    return EnsembleSpec.model_validate({**body, **extra})


def replace_model(name: str, m: Model) -> dict[str, Model]:
    return {**BASE_MODELS, name: m}


CASES: list[tuple[str, EnsembleSpec, dict[str, Model], list[tuple[str, str | None, str | None]]]] = [
    ("valid pipeline", spec(), BASE_MODELS, []),
    (
        "missing model",
        spec(),
        {k: m for k, m in BASE_MODELS.items() if k != "cls"},
        [(v.MISSING_MODEL, "b", None)],
    ),
    (
        "tensor consumed but never produced",
        spec([BASE_STEPS[0], step("b", "cls", {"x": "pixels"}, {"y": "logits"}), BASE_STEPS[2]]),
        BASE_MODELS,
        [(v.UNPRODUCED_TENSOR, "b", "pixels"), (v.UNUSED_TENSOR, "a", "pix")],
    ),
    (
        "ensemble output nobody produces",
        spec(
            outputs=[
                {"name": "label", "dataType": "STRING", "dims": [1]},
                {"name": "score", "dataType": "FP32"},
            ]
        ),
        BASE_MODELS,
        [(v.UNPRODUCED_OUTPUT, None, "score")],
    ),
    (
        "two steps produce one tensor",
        spec([*BASE_STEPS, step("d", "cls", {"x": "pix"}, {"y": "logits"})]),
        BASE_MODELS,
        [(v.DUPLICATE_PRODUCER, "d", "logits")],
    ),
    (
        "dtype mismatch between steps",
        spec(),
        replace_model("cls", model("cls", {"x": ("FP16", [3, -1])}, {"y": ("FP32", [10])}, maxBatchSize=8)),
        [(v.DTYPE_MISMATCH, "b", "pix")],
    ),
    (
        "shape mismatch between steps",
        spec(),
        replace_model("cls", model("cls", {"x": ("FP32", [3, 5])}, {"y": ("FP32", [10])}, maxBatchSize=8)),
        [(v.SHAPE_MISMATCH, "b", "pix")],
    ),
    (
        # Triton's rule (the runtime's): shapes agree without the batch dimension or, failing that, with it
        "batch dimension: a non-batching model in a batching ensemble, with or without spelling it out",
        spec(),
        replace_model(
            "cls", model("cls", {"x": ("FP32", [-1, 3, 4])}, {"y": ("FP32", [10])}, maxBatchSize=0)
        ),
        [],
    ),
    (
        "batch dimension: a non-batching model whose shape agrees neither way",
        spec(),
        replace_model("cls", model("cls", {"x": ("FP32", [3, 4, 1])}, {"y": ("FP32", [10])}, maxBatchSize=0)),
        [(v.SHAPE_MISMATCH, "b", "pix")],
    ),
    (
        "model batch size below the ensemble's",
        spec(maxBatchSize=16),
        BASE_MODELS,
        [(v.BATCH_SIZE, "a", None), (v.BATCH_SIZE, "b", None), (v.BATCH_SIZE, "c", None)],
    ),
    (
        "ensemble output dtype differs from its producer",
        spec(outputs=[{"name": "label", "dataType": "FP32", "dims": [1]}]),
        BASE_MODELS,
        [(v.DTYPE_MISMATCH, "c", "label")],
    ),
    (
        "unknown model input and output names",
        spec(
            [
                BASE_STEPS[0],
                step("b", "cls", {"x": "pix", "z": "raw"}, {"y": "logits", "w": "extra"}),
                BASE_STEPS[2],
            ]
        ),
        BASE_MODELS,
        [(v.UNKNOWN_MODEL_OUTPUT, "b", "extra"), (v.UNKNOWN_MODEL_INPUT, "b", "raw"), (v.UNUSED_TENSOR, "b", "extra")],
    ),
    (
        "model input left unmapped",
        spec([BASE_STEPS[0], step("b", "cls", {}, {"y": "logits"}), BASE_STEPS[2]]),
        BASE_MODELS,
        [(v.UNMAPPED_MODEL_INPUT, "b", "x"), (v.EMPTY_MAP, "b", None), (v.UNUSED_TENSOR, "a", "pix")],
    ),
    (
        "pinned version not in repository",
        spec([BASE_STEPS[0], step("b", "cls", {"x": "pix"}, {"y": "logits"}, version=7), BASE_STEPS[2]]),
        replace_model(
            "cls",
            model("cls", {"x": ("FP32", [3, -1])}, {"y": ("FP32", [10])}, status={"versionsFound": [1, 2]}),
        ),
        [(v.VERSION_NOT_FOUND, "b", None)],
    ),
    (
        "pinned version outside the policy",
        spec([BASE_STEPS[0], step("b", "cls", {"x": "pix"}, {"y": "logits"}, version=1), BASE_STEPS[2]]),
        replace_model(
            "cls",
            model(
                "cls",
                {"x": ("FP32", [3, -1])},
                {"y": ("FP32", [10])},
                versionPolicy={"specific": {"versions": [2]}},
            ),
        ),
        [(v.VERSION_NOT_SERVED, "b", None)],
    ),
    (
        "pinned version found and served",
        spec([BASE_STEPS[0], step("b", "cls", {"x": "pix"}, {"y": "logits"}, version=2), BASE_STEPS[2]]),
        replace_model(
            "cls",
            model("cls", {"x": ("FP32", [3, -1])}, {"y": ("FP32", [10])}, status={"versionsFound": [1, 2]}),
        ),
        [],
    ),
    (
        "models disagree on the S3 endpoint",
        spec(),
        {
            **BASE_MODELS,
            "pre": model(
                "pre", {"RAW": ("UINT8", [-1])}, {"PIX": ("FP32", [3, 4])}, s3={"endpointUrl": "http://a"}
            ),
            "cls": model(
                "cls", {"x": ("FP32", [3, -1])}, {"y": ("FP32", [10])}, s3={"endpointUrl": "http://b"}
            ),
        },
        [(v.CONFLICTING_S3, "b", None)],
    ),
]


@pytest.mark.parametrize(("name", "ens", "models", "expected"), CASES, ids=[c[0] for c in CASES])
def test_graph_checks(
    name: str, ens: EnsembleSpec, models: dict[str, Model], expected: list[tuple[str, str | None, str | None]]
) -> None:
    issues = v.validate_ensemble(ens, models)
    got = sorted((i.code, i.step, i.tensor) for i in issues)
    assert got == sorted(expected), [i.message for i in issues]
    for issue in issues:
        if issue.step:
            assert f"'{issue.step}'" in issue.message
        if issue.tensor:
            assert f"'{issue.tensor}'" in issue.message


def test_cycle_is_reported_with_its_path() -> None:
    steps = [
        step("a", "cls", {"x": "t3"}, {"y": "t1"}),
        step("b", "cls", {"x": "t1"}, {"y": "t2"}),
        step("c", "cls", {"x": "t2"}, {"y": "t3"}),
        step("d", "post", {"p": "t2"}, {"label": "label"}),
    ]
    issues = v.validate_ensemble(spec(steps), {})
    cycles = [i for i in issues if i.code == v.CYCLE]
    assert len(cycles) == 1
    assert "step 'a' -> step 'b' -> step 'c' -> step 'a'" in cycles[0].message
    assert {i.code for i in issues} == {v.CYCLE, v.MISSING_MODEL, v.UNUSED_TENSOR}  # 'raw' feeds no step


def test_admission_warns_only_about_versions_storage_may_gain() -> None:
    issues = v.validate_ensemble(spec(), {})
    assert issues and all(i.code == v.MISSING_MODEL and not i.admission_warning for i in issues)
    assert v.Issue(v.VERSION_NOT_FOUND, "m").admission_warning
    assert not v.Issue(v.SHAPE_MISMATCH, "m").admission_warning


def test_summary_truncates() -> None:
    issues = [v.Issue(v.CYCLE, f"problem {n}") for n in range(8)]
    assert v.summarize(issues, limit=3) == "problem 0; problem 1; problem 2; and 5 more"


def test_example_is_valid(ensemble: Any, models: dict[str, Model]) -> None:
    assert v.validate_ensemble(ensemble.spec, models) == []
