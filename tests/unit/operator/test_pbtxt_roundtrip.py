"""Every string the operator writes into a ModelConfig text reads back unchanged through the runtime's own
parser (property-based): arbitrary Unicode, non-BMP characters (emoji), quotes, backslashes, newlines and
control characters included. The operator never imports the runtime; this test holds the two together."""

from __future__ import annotations

from ensemble_operator.api.v1alpha1 import EnsembleSpec, ModelSpec
from ensemble_operator.render.pbtxt import ensemble_config, model_config
from ensemble_runtime.config.model_config import parse_config_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Strings reach the operator as JSON from the API server, which never hands out lone surrogates.
_TRICKY = ['"', "\\", "\n", "\r", "\t", "\x00", "\x7f", "'", "?", "\u2028", "\x85", "é", "\U0001f600", "\U0010ffff"]
CHARS = st.one_of(st.sampled_from(_TRICKY), st.characters(exclude_categories=["Cs"]))
TEXT = st.text(CHARS, max_size=24)
NAME = st.text(CHARS, min_size=1, max_size=24)  # tensor names: 1..128 characters in the CRD
DNS = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?", fullmatch=True)

SETTINGS = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def _tensors(names: list[str]) -> list[dict[str, object]]:
    return [{"name": n, "dataType": "FP32", "dims": [2]} for n in names]


@SETTINGS
@given(
    name=NAME,
    platform=st.text(CHARS, min_size=1, max_size=16),
    backend=st.text(CHARS, min_size=1, max_size=16),
    inputs=st.lists(NAME, max_size=3),
    outputs=st.lists(NAME, max_size=3),
    parameters=st.dictionaries(TEXT, TEXT, max_size=4),
)
def test_model_config_strings_round_trip(
    name: str, platform: str, backend: str, inputs: list[str], outputs: list[str], parameters: dict[str, str]
) -> None:
    spec = ModelSpec.model_validate(
        {
            "source": "/models/m",
            "platform": platform,
            "backend": backend,
            "inputs": _tensors(inputs),
            "outputs": _tensors(outputs),
            "parameters": parameters,
        }
    )
    parsed = parse_config_text(model_config(name, spec))
    assert parsed.name == name
    assert parsed.platform == platform
    assert parsed.backend == backend
    assert [t.name for t in parsed.input] == inputs
    assert [t.name for t in parsed.output] == outputs
    assert {k: v.string_value for k, v in parsed.parameters.items()} == parameters


@SETTINGS
@given(
    name=NAME,
    inputs=st.lists(NAME, min_size=1, max_size=3, unique=True),
    outputs=st.lists(NAME, min_size=1, max_size=3, unique=True),
    model=DNS,
    input_map=st.dictionaries(NAME, NAME, max_size=3),
    output_map=st.dictionaries(NAME, NAME, max_size=3),
)
def test_ensemble_config_strings_round_trip(
    name: str,
    inputs: list[str],
    outputs: list[str],
    model: str,
    input_map: dict[str, str],
    output_map: dict[str, str],
) -> None:
    spec = EnsembleSpec.model_validate(
        {
            "inputs": _tensors(inputs),
            "outputs": _tensors(outputs),
            "steps": [
                {"name": "first", "modelRef": {"name": model}, "inputMap": input_map, "outputMap": output_map},
                {"name": "second", "modelRef": {"name": model}, "inputMap": output_map, "outputMap": input_map},
            ],
        }
    )
    parsed = parse_config_text(ensemble_config(name, spec))
    assert parsed.name == name
    assert [t.name for t in parsed.input] == inputs
    assert [t.name for t in parsed.output] == outputs
    steps = parsed.ensemble_scheduling.step
    assert [s.model_name for s in steps] == [model, model]
    assert dict(steps[0].input_map) == input_map and dict(steps[0].output_map) == output_map
    assert dict(steps[1].input_map) == output_map and dict(steps[1].output_map) == input_map


def test_an_emoji_is_written_as_utf8_octal_escapes() -> None:
    """The literal itself: one 4-byte UTF-8 sequence, no surrogate pair (what JSON escaping wrote)."""
    spec = ModelSpec.model_validate({"source": "/m", "parameters": {"k\U0001f600": "v"}})
    text = model_config("m", spec)
    assert 'key: "k\\360\\237\\230\\200"' in text
    assert "\\ud83d" not in text
    assert text.isascii()
