"""Our runtime and the real Triton serve the same python ensemble; the same tritonclient calls must agree.

Outputs, model metadata (names, shapes, datatypes) and the status codes of the common client errors
(unknown model, wrong datatype, missing input) are compared, over gRPC and HTTP. Needs the peer installed
by tools/setup-triton.sh; skipped without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, TypeAlias

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from bench.models import build_chain_repository
from bench.triton_peer import TritonPeer, not_installed_reason
from tests.support.runtime_process import RuntimeProcess

_REASON = not_installed_reason()
pytestmark = [pytest.mark.triton, pytest.mark.skipif(_REASON is not None, reason=_REASON or "")]

Client: TypeAlias = "grpcclient.InferenceServerClient | httpclient.InferenceServerClient"
PROTOCOLS: dict[str, ModuleType] = {"grpc": grpcclient, "http": httpclient}
MODELS = ("chain2", "add_one_0")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    build_chain_repository(root, lengths=(2,))
    return root


@pytest.fixture(scope="module")
def servers(repository: Path) -> Iterator[dict[str, RuntimeProcess | TritonPeer]]:
    with RuntimeProcess([repository]) as ours, TritonPeer([repository]) as triton:
        ours.wait_ready()
        triton.wait_ready()
        yield {"ours": ours, "triton": triton}


def _clients(servers: dict[str, RuntimeProcess | TritonPeer], protocol: str) -> dict[str, Client]:
    return {name: s.grpc_client() if protocol == "grpc" else s.http_client() for name, s in servers.items()}


def _input(module: ModuleType, name: str, value: np.ndarray[Any, Any], datatype: str) -> Any:
    tensor = module.InferInput(name, list(value.shape), datatype)
    tensor.set_data_from_numpy(value)
    return tensor


def _metadata(client: Client, model: str) -> dict[str, Any]:
    raw = client.get_model_metadata(model, as_json=True) if isinstance(client, grpcclient.InferenceServerClient) \
        else client.get_model_metadata(model)
    def tensors(key: str) -> list[tuple[str, str, list[int]]]:
        return [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in raw[key]]
    return {"name": raw["name"], "platform": raw.get("platform"), "versions": raw.get("versions"),
            "inputs": tensors("inputs"), "outputs": tensors("outputs")}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_same_outputs(servers: dict[str, RuntimeProcess | TritonPeer], protocol: str) -> None:
    module = PROTOCOLS[protocol]
    value = np.linspace(-1.0, 1.0, 16, dtype=np.float32)
    results = {}
    for name, client in _clients(servers, protocol).items():
        result = client.infer("chain2", [_input(module, "IN", value, "FP32")])
        out = result.as_numpy("OUT")
        results[name] = (out.dtype, out.shape, out.tolist())
    assert results["ours"] == results["triton"]
    one = np.float32(1.0)
    assert results["ours"][2] == (value + one + one).tolist()  # two add_one steps, in float32


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", MODELS)
def test_same_metadata(servers: dict[str, RuntimeProcess | TritonPeer], protocol: str, model: str) -> None:
    metadata = {name: _metadata(client, model) for name, client in _clients(servers, protocol).items()}
    assert metadata["ours"] == metadata["triton"]


def _unknown_model(module: ModuleType, client: Client) -> object:
    return client.infer("no_such_model", [_input(module, "IN", np.zeros(16, np.float32), "FP32")])


def _wrong_dtype(module: ModuleType, client: Client) -> object:
    return client.infer("chain2", [_input(module, "IN", np.zeros(16, np.int32), "INT32")])


def _missing_input(module: ModuleType, client: Client) -> object:
    return client.infer("chain2", [])


ERRORS: dict[str, tuple[Callable[[ModuleType, Client], object], dict[str, str]]] = {
    "unknown model": (_unknown_model, {"grpc": "StatusCode.NOT_FOUND", "http": "404"}),
    "wrong dtype": (_wrong_dtype, {"grpc": "StatusCode.INVALID_ARGUMENT", "http": "400"}),
    "missing input": (_missing_input, {"grpc": "StatusCode.INVALID_ARGUMENT", "http": "400"}),
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("case", ERRORS)
def test_same_error_status(servers: dict[str, RuntimeProcess | TritonPeer], protocol: str, case: str) -> None:
    call, expected = ERRORS[case]
    statuses = {}
    for name, client in _clients(servers, protocol).items():
        with pytest.raises(InferenceServerException) as caught:
            call(PROTOCOLS[protocol], client)
        statuses[name] = caught.value.status()
    assert statuses == {"ours": expected[protocol], "triton": expected[protocol]}


def test_same_answer_to_a_version_that_is_no_number(servers: dict[str, RuntimeProcess | TritonPeer]) -> None:
    """gRPC metadata and readiness of version 'abc': INVALID_ARGUMENT 'failed to get model version from
    specified version string 'abc'' from both (the rest of Triton's message differs: '(details: stol)')."""
    answers = {}
    for name, client in _clients(servers, "grpc").items():
        for what, call in (("metadata", client.get_model_metadata), ("ready", client.is_model_ready)):
            with pytest.raises(InferenceServerException) as caught:
                call("chain2", "abc")
            prefix = "failed to get model version from specified version string 'abc'"
            answers[name, what] = (caught.value.status(), prefix in caught.value.message())
    assert set(answers.values()) == {("StatusCode.INVALID_ARGUMENT", True)}, answers
