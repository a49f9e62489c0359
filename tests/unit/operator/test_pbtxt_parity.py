"""The config.pbtxt the operator now writes through protobuf's text format (ensemble_contract.model_config) reads,
in the runtime's own parser (Triton's full ModelConfig), exactly as the text the concatenating renderer wrote
before issue 14 (pbtxt_concatenated.py), for Models and Ensembles using every field the renderer writes, with
names carrying quotes, backslashes, control characters, non-ASCII and non-BMP characters (property-based). The
operator never imports the runtime; this test holds the two together."""

from __future__ import annotations

from typing import Any

import pytest
from ensemble_contract.model_config import model_config_message
from ensemble_operator.api.v1alpha1 import Ensemble, EnsembleSpec, Model, ModelSpec
from ensemble_operator.render.pbtxt import ensemble_config, model_config
from ensemble_runtime.config.model_config import parse_config_text
from google.protobuf import text_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from tritonclient.grpc import model_config_pb2 as mc

from tests.unit.operator import pbtxt_concatenated as before
from tests.unit.operator.test_graph_parity import ensembles

INT32_MAX, UINT32_MAX, INT64_MAX = 2**31 - 1, 2**32 - 1, 2**63 - 1
# Strings reach the operator as JSON from the API server, which never hands out lone surrogates.
_TRICKY = ['"', "\\", "\n", "\r", "\t", "\x00", "\x7f", "'", "?", "{", "}", "#", ":", "\u2028", "\x85", "é",
           "\U0001f600", "\U0010ffff"]
CHARS = st.one_of(st.sampled_from(_TRICKY), st.characters(exclude_categories=["Cs"]))
TEXT = st.text(CHARS, max_size=16)
NAME = st.text(CHARS, min_size=1, max_size=16)
DNS = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?", fullmatch=True)
BARE_TYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32",
              "FP64", "BF16", "BYTES", "STRING"]
DATA_TYPE = st.sampled_from(BARE_TYPES + [f"TYPE_{t}" for t in BARE_TYPES])
DIMS = st.lists(st.integers(-1, 2**40), max_size=4)

SETTINGS = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def tensors(min_size: int = 0) -> st.SearchStrategy[list[dict[str, Any]]]:
    return st.lists(
        st.fixed_dictionaries({"name": NAME, "dataType": DATA_TYPE, "dims": DIMS}),
        min_size=min_size, max_size=3, unique_by=lambda t: t["name"],
    )


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


POLICY: st.SearchStrategy[Any] = st.one_of(
    st.fixed_dictionaries({"latest": st.fixed_dictionaries({"numVersions": st.integers(1, UINT32_MAX)})}),
    st.fixed_dictionaries({"specific": st.fixed_dictionaries(
        {"versions": st.lists(st.integers(1, INT64_MAX), min_size=1, max_size=4)})}),
    st.just({"all": {}}),
)
BATCHING = st.fixed_dictionaries({}, optional={
    "preferredBatchSize": st.lists(st.integers(1, INT32_MAX), max_size=3),
    "maxQueueDelayMicroseconds": st.integers(0, INT64_MAX),
})
GROUP = st.fixed_dictionaries({}, optional={
    "count": st.integers(1, INT32_MAX),
    "kind": st.sampled_from(["KIND_AUTO", "KIND_GPU", "KIND_CPU"]),
    "gpus": st.lists(st.integers(0, INT32_MAX), max_size=3),
})
MODEL = st.fixed_dictionaries({"source": st.just("/models/m")}, optional={
    "platform": TEXT, "backend": TEXT, "versionPolicy": POLICY, "maxBatchSize": st.integers(0, INT32_MAX),
    "dynamicBatching": BATCHING, "instanceGroups": st.lists(GROUP, max_size=3), "inputs": tensors(),
    "outputs": tensors(), "parameters": st.dictionaries(TEXT, TEXT, max_size=4),
})
STEP = st.fixed_dictionaries({
    "modelRef": st.fixed_dictionaries({"name": DNS}),
    "inputMap": st.dictionaries(NAME, NAME, max_size=3),
    "outputMap": st.dictionaries(NAME, NAME, max_size=3),
}, optional={"modelVersion": st.integers(-1, INT64_MAX)})
ENSEMBLE = st.fixed_dictionaries({
    "inputs": tensors(min_size=1), "outputs": tensors(min_size=1), "steps": st.lists(STEP, min_size=1, max_size=4),
}, optional={"maxBatchSize": st.integers(0, INT32_MAX)})


def read_alike(text: str, reference: str) -> mc.ModelConfig:
    """`text` parses, in the runtime, to what `reference` parses to; so does its wire form in Triton's message."""
    assert text.isascii()
    parsed = parse_config_text(text)
    assert parsed == parse_config_text(reference), f"new:\n{text}\nbefore:\n{reference}"
    wire = text_format.Parse(text, model_config_message({})).SerializeToString()
    assert mc.ModelConfig.FromString(wire) == parsed
    return parsed


@SETTINGS
@given(name=NAME, wire=MODEL)
def test_a_model_config_reads_as_before(name: str, wire: dict[str, Any]) -> None:
    spec = ModelSpec.model_validate(wire)
    parsed = read_alike(model_config(name, spec), before.model_config(name, spec))
    assert parsed.name == name  # not two equal mistakes: the values are there
    assert {k: v.string_value for k, v in parsed.parameters.items()} == spec.parameters


@SETTINGS
@given(name=NAME, wire=ENSEMBLE)
def test_an_ensemble_config_reads_as_before(name: str, wire: dict[str, Any]) -> None:
    wire["steps"] = [{**step, "name": f"s{i}"} for i, step in enumerate(wire["steps"])]
    spec = EnsembleSpec.model_validate(wire)
    parsed = read_alike(ensemble_config(name, spec), before.ensemble_config(name, spec))
    assert [dict(step.input_map) for step in parsed.ensemble_scheduling.step] == [s.input_map for s in spec.steps]


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=ensembles())
def test_the_graph_parity_specs_read_as_before(case: tuple[Ensemble, dict[str, Model]]) -> None:
    """The Ensembles and Models test_graph_parity generates (valid and broken wiring alike)."""
    ensemble, models = case
    read_alike(ensemble_config("pipe", ensemble.spec), before.ensemble_config("pipe", ensemble.spec))
    for name, model in models.items():
        read_alike(model_config(name, model.spec), before.model_config(name, model.spec))


@pytest.mark.parametrize(
    ("field", "largest"),
    [
        ("maxBatchSize", INT32_MAX),
        ("versionPolicy.latest.numVersions", UINT32_MAX),
        ("dynamicBatching.preferredBatchSize.0", INT32_MAX),
        ("instanceGroups.0.count", INT32_MAX),
        ("instanceGroups.0.gpus.0", INT32_MAX),
    ],
)
def test_the_api_admits_only_numbers_the_config_can_hold(field: str, largest: int) -> None:
    """Triton's int32/uint32 fields: the largest value renders; one more is refused by the CRD's schema (and the
    model), never left for the renderer (or the runtime) to fail on."""

    def spec(value: int) -> dict[str, Any]:
        wire: dict[str, Any] = {"source": "/models/m", "versionPolicy": {"latest": {}},
                                "dynamicBatching": {"preferredBatchSize": [1]}, "instanceGroups": [{"gpus": [0]}]}
        *path, last = field.split(".")
        node: Any = wire
        for key in path:
            node = node[int(key)] if key.isdigit() else node.setdefault(key, {})
        node[int(last) if last.isdigit() else last] = value
        return wire

    parse_config_text(model_config("m", ModelSpec.model_validate(spec(largest))))
    with pytest.raises(ValidationError):
        ModelSpec.model_validate(spec(largest + 1))


def test_an_ensemble_batch_size_past_int32_is_refused() -> None:
    wire = {"inputs": [{"name": "a", "dataType": "FP32"}], "outputs": [{"name": "b", "dataType": "FP32"}],
            "steps": [{"name": "s", "modelRef": {"name": "m"}}], "maxBatchSize": INT32_MAX}
    parse_config_text(ensemble_config("e", EnsembleSpec.model_validate(wire)))
    with pytest.raises(ValidationError):
        EnsembleSpec.model_validate({**wire, "maxBatchSize": INT32_MAX + 1})


@SETTINGS
@given(parameters=st.dictionaries(TEXT, TEXT, min_size=2, max_size=5), wire=ENSEMBLE)
def test_the_text_does_not_depend_on_map_order(parameters: dict[str, str], wire: dict[str, Any]) -> None:
    """Maps (parameters, input_map, output_map) are written sorted: the same spec, whatever order its maps came
    in, renders the same bytes, so the ConfigMap and its hash do not change when nothing did."""
    model = {"source": "/models/m", "parameters": parameters}
    shuffled = {**model, "parameters": dict(reversed(parameters.items()))}
    assert model_config("m", ModelSpec.model_validate(model)) == model_config("m", ModelSpec.model_validate(shuffled))
    wire["steps"] = [{**step, "name": f"s{i}"} for i, step in enumerate(wire["steps"])]
    flipped = {**wire, "steps": [{**s, "inputMap": dict(reversed(s["inputMap"].items())),
                                  "outputMap": dict(reversed(s["outputMap"].items()))} for s in wire["steps"]]}
    spec, other = EnsembleSpec.model_validate(wire), EnsembleSpec.model_validate(flipped)
    assert ensemble_config("e", spec) == ensemble_config("e", other)
