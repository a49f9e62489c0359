"""Pinned step versions (`model_version: 2`) against -1 (latest under the step model's policy)."""

from __future__ import annotations

import numpy as np
import tritonclient.grpc as grpcclient

from tests.integration.ensembles.support import ensemble_versions, fp32_input, index, x_rows
from tests.support.runtime_process import RuntimeProcess


def infer(client: grpcclient.InferenceServerClient, model: str, x: np.ndarray) -> grpcclient.InferResult:
    return client.infer(model, [fp32_input("X", x)])


def test_pinned_ensembles_are_ready_after_startup(server: RuntimeProcess) -> None:
    with server.grpc_client() as client:
        states = {e["name"]: e for e in index(client) if e["name"] in ("pinned_v2", "mixed_v")}
        assert client.is_model_ready("pinned_v2"), states
        assert client.is_model_ready("mixed_v"), states


def test_pinned_version_vs_latest(server: RuntimeProcess) -> None:
    x = x_rows(0.5, 7.0)
    with server.grpc_client() as client:
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


def test_two_steps_on_one_model_at_different_versions(server: RuntimeProcess) -> None:
    with server.grpc_client() as client:
        result = infer(client, "mixed_v", x_rows(1.0))
        assert result.as_numpy("v_one").tolist() == [[1]]
        assert result.as_numpy("v_latest").tolist() == [[3]]
        assert ensemble_versions(result) == "vmodel:1,vmodel:3"
