"""The webhook admits exactly the Ensembles the runtime then loads (property-based).

Hypothesis generates Ensembles and their Models (steps, tensor wiring, data types, shapes with -1, batching
ensembles and models with and without a batch dimension, unknown and missing map keys, cycles, unused
tensors); the webhook's verdict (`validate_ensemble`, as at admission) must equal the runtime's load verdict
on the configs the operator renders for them (`config.pbtxt` text parsed, defaulted and checked as the model
manager does, then `build_graph`). The operator never imports the runtime; this test holds the two together.
"""

from __future__ import annotations

from typing import Any

from ensemble_operator.api.v1alpha1 import Ensemble, Model
from ensemble_operator.render.pbtxt import ensemble_config, model_config
from ensemble_operator.validation import validate_ensemble
from ensemble_runtime.config.model_config import ConfigError, apply_defaults, check_config, parse_config_text
from ensemble_runtime.ensemble import build_graph
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

DTYPES = st.sampled_from(["FP32", "INT64"])
DIMS = st.sampled_from([[3], [-1], [-1, 3], [1, 3], [2], []])
BATCH = st.sampled_from([0, 2, 4, 8])
MUTATIONS = [
    "dtype", "dims", "batch-dim", "unknown-input-key", "unknown-output-key", "unmapped-input", "unmapped-output",
    "unproduced", "cycle", "duplicate-producer", "output-from-input", "unused-input", "unused-output",
]

SETTINGS = settings(max_examples=800, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def ensembles(draw: st.DrawFn) -> tuple[Ensemble, dict[str, Model]]:
    """A chain IN0 -> s0 -> t0 -> s1 -> ... -> OUT0 (steps may also read IN1 or earlier tensors), declared
    consistently, with zero to two mutations from MUTATIONS applied."""
    n_steps = draw(st.integers(1, 3))
    ensemble_batch = draw(st.sampled_from([0, 4]))
    chain = ["IN0", *[f"t{i}" for i in range(n_steps - 1)], "OUT0"]
    shape = {t: (draw(DTYPES), draw(DIMS)) for t in [*chain, "IN1"]}
    mutations = draw(st.lists(st.sampled_from(MUTATIONS), max_size=2, unique=True))
    if draw(st.booleans()):
        mutations = []  # half of the cases are valid as built

    def decl(name: str, tensor: str, batching: bool) -> dict[str, Any]:
        data_type, dims = shape[tensor]
        if not batching and ensemble_batch and draw(st.booleans()):
            dims = [-1, *dims]  # a non-batching model in a batching ensemble may spell out the batch dim
        return {"name": name, "dataType": data_type, "dims": list(dims)}

    models: dict[str, Model] = {}
    steps: list[dict[str, Any]] = []
    uses_in1 = False
    for i in range(n_steps):
        name = f"m{i}"
        batch = draw(st.sampled_from([0, ensemble_batch, 8])) if ensemble_batch else draw(st.sampled_from([0, 4]))
        batching = batch > 0 if ensemble_batch else False
        reads = {"x0": chain[i]}
        if draw(st.integers(0, 3)) == 0:
            reads["x1"] = draw(st.sampled_from(["IN1", *chain[: i + 1]]))
            uses_in1 |= reads["x1"] == "IN1"
        writes = {"y0": chain[i + 1]}
        inputs = [decl(key, tensor, batching) for key, tensor in reads.items()]
        outputs = [decl(key, tensor, batching) for key, tensor in writes.items()]
        spec = {"source": f"/models/{name}", "backend": "python", "maxBatchSize": batch, "inputs": inputs,
                "outputs": outputs}
        models[name] = spec  # type: ignore[assignment]  # a dict until the mutations are done
        steps.append({"name": f"s{i}", "modelRef": {"name": name}, "inputMap": reads, "outputMap": writes})
    inputs = [decl("IN0", "IN0", ensemble_batch > 0)] + ([decl("IN1", "IN1", ensemble_batch > 0)] if uses_in1 else [])
    outputs = [decl("OUT0", "OUT0", ensemble_batch > 0)]

    for mutation in mutations:
        i = draw(st.integers(0, n_steps - 1))
        step, model = steps[i], models[f"m{i}"]
        tensors: Any = model
        if mutation == "dtype":
            target = draw(st.sampled_from([*tensors["inputs"], *tensors["outputs"], *inputs, *outputs]))
            target["dataType"] = "INT64" if target["dataType"] == "FP32" else "FP32"
        elif mutation == "dims":
            target = draw(st.sampled_from([*tensors["inputs"], *tensors["outputs"], *inputs, *outputs]))
            target["dims"] = draw(DIMS)
        elif mutation == "batch-dim":
            tensors["maxBatchSize"] = draw(BATCH)
        elif mutation == "unknown-input-key":
            step["inputMap"]["bogus"] = draw(st.sampled_from(chain))
        elif mutation == "unknown-output-key":
            step["outputMap"]["bogus"] = f"b{i}"
        elif mutation == "unmapped-input":
            step["inputMap"].pop("x0")
        elif mutation == "unmapped-output":
            step["outputMap"].pop("y0")
        elif mutation == "unproduced":
            step["inputMap"]["x0"] = "nowhere"
        elif mutation == "cycle":
            steps[0]["inputMap"]["x0"] = chain[-2] if n_steps > 1 else "OUT0"
        elif mutation == "duplicate-producer":
            step["outputMap"]["y0"] = draw(st.sampled_from(chain))
        elif mutation == "output-from-input":
            outputs.append(decl("IN0", "IN0", ensemble_batch > 0) | {"name": "IN0"})
        elif mutation == "unused-input":
            inputs.append({"name": "SPARE", "dataType": "FP32", "dims": [1]})
        elif mutation == "unused-output":
            tensors["outputs"].append({"name": "y9", "dataType": "FP32", "dims": [1]})
            step["outputMap"]["y9"] = f"spare{i}"
    event(f"mutations: {', '.join(sorted(mutations)) or 'none'}")
    body = {"maxBatchSize": ensemble_batch, "inputs": inputs, "outputs": outputs, "steps": steps}
    ensemble = Ensemble.model_validate({"metadata": {"name": "pipe"}, "spec": body})
    built = {name: Model.model_validate({"metadata": {"name": name}, "spec": spec}) for name, spec in models.items()}
    return ensemble, built


def webhook_admits(ensemble: Ensemble, models: dict[str, Model]) -> bool:
    return not [i for i in validate_ensemble(ensemble.spec, models) if not i.admission_warning]


def runtime_loads(ensemble: Ensemble, models: dict[str, Model]) -> str | None:
    """None when the runtime loads the rendered ensemble, else its reason."""
    try:
        configs = {}
        for name, model in models.items():
            config = apply_defaults(parse_config_text(model_config(name, model.spec)), name)
            check_config(config, name)
            configs[name] = config
        config = apply_defaults(parse_config_text(ensemble_config("pipe", ensemble.spec)), "pipe")
        check_config(config, "pipe")
        build_graph(config, configs, {name: [1] for name in models})
    except ConfigError as exc:
        return str(exc)
    return None


def _case(ensemble_batch: int, model_batch: int, produced: list[int], consumed: list[int]) -> tuple[Ensemble, dict[str, Model]]:
    """One step: IN0 -> m0 -> OUT0 with the given shapes (explicit examples of the batch-dimension rule)."""
    tensor = {"dataType": "FP32"}
    model = Model.model_validate({"metadata": {"name": "m0"}, "spec": {
        "source": "/models/m0", "backend": "python", "maxBatchSize": model_batch,
        "inputs": [{"name": "x0", **tensor, "dims": consumed}], "outputs": [{"name": "y0", **tensor, "dims": [3]}]}})
    ensemble = Ensemble.model_validate({"metadata": {"name": "pipe"}, "spec": {
        "maxBatchSize": ensemble_batch,
        "inputs": [{"name": "IN0", **tensor, "dims": produced}], "outputs": [{"name": "OUT0", **tensor, "dims": [3]}],
        "steps": [{"name": "s0", "modelRef": {"name": "m0"}, "inputMap": {"x0": "IN0"}, "outputMap": {"y0": "OUT0"}}]}})
    return ensemble, {"m0": model}


@SETTINGS
@example(case=_case(4, 0, [3], [3]))  # non-batching model in a batching ensemble, same dims: both load it
@example(case=_case(4, 0, [3], [-1, 3]))  # the model spells out the batch dimension
@example(case=_case(4, 2, [3], [3]))  # the model allows a smaller batch than the ensemble
@given(case=ensembles())
def test_the_webhook_admits_what_the_runtime_loads(case: tuple[Ensemble, dict[str, Model]]) -> None:
    ensemble, models = case
    refused = runtime_loads(ensemble, models)
    admitted = webhook_admits(ensemble, models)
    event("loads" if refused is None else "refused")
    assert admitted == (refused is None), (
        f"webhook {'admits' if admitted else 'refuses'} "
        f"({[i.message for i in validate_ensemble(ensemble.spec, models)]}), runtime: {refused or 'loads'}"
    )
