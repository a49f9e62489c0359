"""BLS through tritonclient: a Python model calling another model with exec() and with await async_exec()."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.integration.ensembles.support import fp32_input
from tests.support.runtime_process import RuntimeProcess


def scalar(value: float) -> list[grpcclient.InferInput]:
    return [fp32_input("X", np.array([value], np.float32))]


@pytest.mark.parametrize(
    ("model", "offset"),
    [("bls_sync", 1.0), ("bls_async", 2.0)],  # bls_sync -> py_check (python), bls_async -> fail_chain (ensemble)
)
def test_bls_call_succeeds(server: RuntimeProcess, model: str, offset: float) -> None:
    with server.grpc_client() as client:
        for value, root in ((16.0, 4.0), (2.25, 1.5)):
            result = client.infer(model, scalar(value))
            np.testing.assert_allclose(result.as_numpy("Y"), [root + offset])


def test_sync_bls_turns_the_callee_error_into_its_own(server: RuntimeProcess) -> None:
    with server.grpc_client() as client:
        with pytest.raises(InferenceServerException) as info:
            client.infer("bls_sync", scalar(-4.0))
        message = info.value.message()
        assert message.startswith("bls_sync: 'py_check' failed: "), message
        assert "ValueError: py_check: negative input -4.0 is not allowed" in message, message
        np.testing.assert_allclose(client.infer("bls_sync", scalar(9.0)).as_numpy("Y"), [4.0])  # still serving


def test_async_bls_into_an_ensemble_reports_the_failing_step(server: RuntimeProcess) -> None:
    with server.grpc_client() as client:
        with pytest.raises(InferenceServerException) as info:
            client.infer("bls_async", scalar(-9.0))
        message = info.value.message()
        assert message.startswith("bls_async: 'fail_chain' failed: "), message
        assert "ensemble 'fail_chain' step 0 (model 'py_check'" in message, message
        assert "negative input -9.0 is not allowed" in message, message
        np.testing.assert_allclose(client.infer("bls_async", scalar(9.0)).as_numpy("Y"), [5.0])
