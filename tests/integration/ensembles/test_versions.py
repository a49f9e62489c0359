"""Pinned step versions (`model_version: 2`) against -1 (latest under the step model's policy)."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.integration.ensembles.support import ensemble_versions, fp32_input, index, x_rows
from tests.support.runtime_process import RuntimeProcess

STARTUP_PIN_BUG = (
    "model_manager.ModelManager._prepare_ensemble validates pinned step versions against "
    "`step_rec.served`, which a load that also loads the step models (startup, or load(ensemble) before its "
    "steps) has not committed yet: pinned_v2/mixed_v come up UNAVAILABLE with 'pinned model_version N is "
    "not available (available: none)' although vmodel serves 1, 2 and 3; it should validate against the "
    "versions this same load is about to serve (the plans' `served`)"
)


def infer(client: grpcclient.InferenceServerClient, model: str, x: np.ndarray) -> grpcclient.InferResult:
    return client.infer(model, [fp32_input("X", x)])


@pytest.mark.xfail(strict=True, reason=STARTUP_PIN_BUG)
def test_pinned_ensembles_are_ready_after_startup(server: RuntimeProcess) -> None:
    with server.grpc_client() as client:
        states = {e["name"]: e for e in index(client) if e["name"] in ("pinned_v2", "mixed_v")}
        assert client.is_model_ready("pinned_v2"), states
        assert client.is_model_ready("mixed_v"), states


def test_pinned_version_vs_latest(server: RuntimeProcess) -> None:
    x = x_rows(0.5, 7.0)
    with server.grpc_client() as client:
        client.load_model("pinned_v2")  # re-sync: works around STARTUP_PIN_BUG, a no-op once it is fixed
        assert client.is_model_ready("pinned_v2")
        assert client.get_model_metadata("vmodel", as_json=True)["versions"] == ["1", "2", "3"]

        pinned = infer(client, "pinned_v2", x)
        assert pinned.as_numpy("version").tolist() == [[2], [2]]
        np.testing.assert_allclose(pinned.as_numpy("y"), x + 2)
        assert ensemble_versions(pinned) == "vmodel:2"

        latest = infer(client, "latest_v", x)
        assert latest.as_numpy("version").tolist() == [[3], [3]]
        np.testing.assert_allclose(latest.as_numpy("y"), x + 3)
        assert ensemble_versions(latest) == "vmodel:3"


@pytest.mark.xfail(
    strict=True,
    reason=(
        "one version per step MODEL, not per step: registry.EnsembleState.steps / "
        "model_manager.resolve_ensemble_set key the version set by model name (`chosen[step.model_name]`) and "
        "dataplane.DataPlane._infer_ensemble.call_step looks versions up by `steps[step.model_name]`, so in an "
        "ensemble with two steps on vmodel (one `model_version: 1`, one -1) the last step's version wins for "
        "both: v_one comes back 3 instead of 1 and ensemble_versions lists vmodel once. Triton runs each step "
        "on its own version; key the set by step index (or (model, version))"
    ),
)
def test_two_steps_on_one_model_at_different_versions(server: RuntimeProcess) -> None:
    with server.grpc_client() as client:
        client.load_model("mixed_v")  # re-sync (STARTUP_PIN_BUG)
        result = infer(client, "mixed_v", x_rows(1.0))
        assert result.as_numpy("v_one").tolist() == [[1]]
        assert result.as_numpy("v_latest").tolist() == [[3]]
        assert ensemble_versions(result) == "vmodel:1,vmodel:3"
