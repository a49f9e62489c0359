"""The sequence examples' calls and the sequence errors against our runtime and the real Triton, on the same
repository of Python sequence models (tests/integration/sequences/models): same answers, same status codes,
same messages.

Left out because the Triton peer (2.51, Python backend) cannot run them, not because answers differ: the
string-CORRID model (its Python backend fails a TYPE_STRING CORRID control with "unexpected number of string
elements 2 for inference input 'CORRID', expecting 1"), and implicit state (its Python backend never feeds a
state output back: ACC_IN stays zero).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from bench.triton_peer import TritonPeer, not_installed_reason
from tests.integration.sequences import calls
from tests.support.runtime_process import RuntimeProcess

_REASON = not_installed_reason()
pytestmark = [pytest.mark.triton, pytest.mark.skipif(_REASON is not None, reason=_REASON or "")]
PEER_MODELS = ("simple_sequence", "simple_dyna_sequence", "seq_idle")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RuntimeProcess | TritonPeer]]:
    root = tmp_path_factory.mktemp("seqcompat")
    for name in PEER_MODELS:
        shutil.copytree(calls.MODELS / name, root / name)
    with RuntimeProcess([root]) as ours, TritonPeer([root]) as triton:
        ours.wait_ready(timeout=120)
        triton.wait_ready(timeout=180)
        yield {"ours": ours, "triton": triton}


@pytest.mark.parametrize("dyna", [False, True], ids=["simple", "dyna"])
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_sync_example_same_answers(servers: dict[str, Any], protocol: str, dyna: bool) -> None:
    for server in servers.values():
        module: Any = grpcclient if protocol == "grpc" else httpclient
        with (server.grpc_client() if protocol == "grpc" else server.http_client()) as client:
            calls.sync_example(client, module, dyna, offset=3 if protocol == "http" else 0)


def test_stream_examples_same_answers(servers: dict[str, Any]) -> None:
    for server in servers.values():
        calls.grpc_stream(server.grpc_url, dyna=False, offset=40)
        calls.run_aio(server.grpc_url, dyna=False)


def _error(server: Any, call: Any) -> tuple[str, str]:
    with server.grpc_client() as client, pytest.raises(InferenceServerException) as caught:
        call(client)
    return str(caught.value.status()), str(caught.value.message())


def _one(client: Any, **kwargs: Any) -> Any:
    return client.infer("simple_sequence", [calls.value_input(grpcclient, 1)], **kwargs)


def _batch_of_two(client: Any) -> Any:
    tensor = grpcclient.InferInput("INPUT", [2, 1], "INT32")
    tensor.set_data_from_numpy(np.ones((2, 1), np.int32))
    return client.infer("simple_sequence", [tensor], sequence_id=77, sequence_start=True)


CASES = {
    "no correlation ID": lambda c: _one(c),
    "no START (uint64)": lambda c: _one(c, sequence_id=4242),
    "no START (string)": lambda c: _one(c, sequence_id="never-started"),
    "batch of two": _batch_of_two,
}


@pytest.mark.parametrize("case", list(CASES))
def test_errors_same_code_and_message(servers: dict[str, Any], case: str) -> None:
    answers = {name: _error(server, CASES[case]) for name, server in servers.items()}
    assert answers["ours"] == answers["triton"]
    for server in servers.values():  # both still serve
        with server.grpc_client() as client:
            assert calls.sync_send(client, grpcclient, "simple_sequence", [4, 5], 999) == [5, 5]


def test_uint64_correlation_id_same_on_both(servers: dict[str, Any]) -> None:
    seen = {}
    for name, server in servers.items():
        with server.http_client() as client:
            tensor = httpclient.InferInput("INPUT", [1], "INT32")
            tensor.set_data_from_numpy(np.zeros(1, np.int32))
            result = client.infer("seq_idle", [tensor], sequence_id=2**64 - 1, sequence_start=True, sequence_end=True)
            seen[name] = int(result.as_numpy("CORRID_OUT")[0])
    assert seen == {"ours": 2**64 - 1, "triton": 2**64 - 1}
