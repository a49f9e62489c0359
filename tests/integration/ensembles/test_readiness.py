"""Composite readiness: an ensemble is ready only while every step model is."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tests.integration.ensembles.support import fp32_input, index, x_rows
from tests.support.runtime_process import RuntimeProcess


def test_unloading_a_step_makes_the_ensemble_unavailable_and_loading_restores_it(server: RuntimeProcess) -> None:
    x = x_rows(3.0)
    with server.grpc_client() as client:
        assert client.is_model_ready("ready_ens")
        np.testing.assert_allclose(client.infer("ready_ens", [fp32_input("X", x)]).as_numpy("y"), x + 1)

        client.unload_model("ready_step")
        try:
            assert not client.is_model_ready("ready_step")
            assert not client.is_model_ready("ready_ens")
            with pytest.raises(InferenceServerException) as info:
                client.infer("ready_ens", [fp32_input("X", x)])
            assert info.value.status() == "StatusCode.UNAVAILABLE", info.value
            assert "'ready_step'" in info.value.message(), info.value.message()
            entry = next(e for e in index(client) if e["name"] == "ready_ens")
            assert entry["state"] == "UNAVAILABLE" and "'ready_step'" in entry["reason"], entry
            # other ensembles are untouched
            np.testing.assert_allclose(client.infer("fan", [fp32_input("X", x)]).as_numpy("sum"), 3 * x + 10)
        finally:
            client.load_model("ready_step")

        assert client.is_model_ready("ready_step")
        assert client.is_model_ready("ready_ens")
        np.testing.assert_allclose(client.infer("ready_ens", [fp32_input("X", x)]).as_numpy("y"), x + 1)
        assert next(e for e in index(client) if e["name"] == "ready_ens")["state"] == "READY"
