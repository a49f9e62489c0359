"""NVIDIA's `simple` inference examples, as the project's tests, against ours and the real Triton.

Each test makes the calls of one example in triton-inference-server/client src/python/examples (named in
its docstring) with the same arguments, and checks what the example checks: simple_{grpc,http}_infer_client,
simple_{grpc,http}_async_infer_client, simple_{grpc,http}_aio_infer_client, simple_grpc{,_aio}_custom_args_client,
simple_grpc{,_aio}_keepalive_client, grpc_explicit_int_content_client, grpc_explicit_int8_content_client and
memory_growth_test.
"""

from __future__ import annotations

import asyncio
import gzip
import http.client
import json
import queue
import zlib
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.integration.triton_examples.support import check_sum_and_difference, serve, simple_data, simple_inputs
from tests.support.server_process import ServerProcess

MODELS = ("simple", "simple_int8", "custom_identity_int32")
CALLBACK_DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with serve(tmp_path_factory.mktemp("examples"), MODELS) as pair:
        yield pair


def _grpc_outputs(module: Any = grpcclient) -> list[Any]:
    return [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT1")]


@pytest.mark.parametrize("algorithm", [None, "gzip", "deflate"])
def test_simple_grpc_infer_client(server: ServerProcess, algorithm: str | None) -> None:
    """With the example's `-C/--grpc-compression-algorithm` unset (its default), gzip and deflate."""
    in0, in1 = simple_data()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        inputs = simple_inputs(grpcclient, in0, in1)
        result = client.infer(model_name="simple", inputs=inputs, outputs=_grpc_outputs(), client_timeout=None,
                              headers={"test": "1"}, compression_algorithm=algorithm)
        assert len(client.get_inference_statistics(model_name="simple").model_stats) == 1
        check_sum_and_difference(result, in0, in1)
        check_sum_and_difference(client.infer(model_name="simple", inputs=inputs, outputs=None,
                                              compression_algorithm=algorithm), in0, in1)


def _http_infer(client: httpclient.InferenceServerClient, model: str, in0: Any, in1: Any, outputs: bool,
                algorithm: str | None = None) -> Any:
    inputs = simple_inputs(httpclient, in0, in1, binary=(False, True))
    requested = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
                 httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)] if outputs else None
    return client.infer(model, inputs, outputs=requested, query_params={"test_1": 1, "test_2": 2}, headers=None,
                        request_compression_algorithm=algorithm, response_compression_algorithm=algorithm)


@pytest.mark.parametrize("algorithm", [None, "gzip", "deflate"])
def test_simple_http_infer_client(server: ServerProcess, algorithm: str | None) -> None:
    """With the example's --request-compression-algorithm and --response-compression-algorithm unset (their
    default), gzip and deflate."""
    in0, in1 = simple_data(-1)
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        result = _http_infer(client, "simple", in0, in1, outputs=True, algorithm=algorithm)
        assert len(client.get_inference_statistics(model_name="simple", headers=None)["model_stats"]) == 1
        check_sum_and_difference(result, in0, in1)
        check_sum_and_difference(_http_infer(client, "simple", in0, in1, outputs=False, algorithm=algorithm), in0, in1)
        with pytest.raises(InferenceServerException) as wrong:
            _http_infer(client, "wrong_model_name", in0, in1, outputs=True)
        assert wrong.value.message().startswith("Request for unknown model"), wrong.value
    finally:
        client.close()


# (Accept-Encoding, the coding of the answer), as Triton answers them: the client's preferred coding of gzip
# and deflate, none for a coding weighted q=0, for `*` or for codings neither server speaks
ANSWER_CODINGS = [("gzip, deflate", "gzip"), ("deflate, gzip", "deflate"), ("br, deflate;q=0.5", "deflate"),
                  ("gzip;q=0.4, deflate;q=0.6", "deflate"), ("gzip;q=0", None), ("*", None), ("identity", None),
                  ("br", None)]


@pytest.mark.parametrize(("accept", "coding"), ANSWER_CODINGS)
def test_infer_answer_codings(server: ServerProcess, accept: str, coding: str | None) -> None:
    """What python-requests, httpx and Go send unasked: the answer's coding, and the answer within it."""
    in0, in1 = simple_data()
    body = json.dumps({"inputs": [{"name": name, "datatype": "INT32", "shape": [1, 16], "data": data.tolist()}
                                  for name, data in (("INPUT0", in0), ("INPUT1", in1))]}).encode()
    host, port = server.http_url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("POST", "/v2/models/simple/infer", body=body,
                     headers={"Accept-Encoding": accept, "Content-Type": "application/json"})
        response = conn.getresponse()
        answer = response.read()
    finally:
        conn.close()
    assert response.status == 200 and response.getheader("Content-Encoding") == coding, response.getheaders()
    decoders: dict[str, Callable[[bytes], bytes]] = {"gzip": gzip.decompress, "deflate": zlib.decompress}
    plain = decoders.get(coding or "", bytes)(answer)
    outputs = {o["name"]: o["data"] for o in json.loads(plain)["outputs"]}
    assert outputs["OUTPUT0"] == (in0 + in1).reshape(-1).tolist()


def test_simple_grpc_async_infer_client(server: ServerProcess) -> None:
    in0, in1 = simple_data()
    done: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.async_infer(model_name="simple", inputs=simple_inputs(grpcclient, in0, in1),
                           callback=partial(lambda q, result, error: q.put(error or result), done),
                           outputs=_grpc_outputs(), client_timeout=None)
        answer = done.get(timeout=CALLBACK_DEADLINE_S)
    assert not isinstance(answer, InferenceServerException), answer
    check_sum_and_difference(answer, in0, in1)


def test_simple_http_async_infer_client(server: ServerProcess) -> None:
    in0, in1 = simple_data()
    client = httpclient.InferenceServerClient(server.http_url, concurrency=2)
    try:
        inputs = simple_inputs(httpclient, in0, in1, binary=(True, True))
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
                   httpclient.InferRequestedOutput("OUTPUT1", binary_data=True)]
        pending = [client.async_infer(model_name="simple", inputs=inputs, outputs=outputs) for _ in range(2)]
        for request in pending:
            check_sum_and_difference(request.get_result(), in0, in1)
    finally:
        client.close()


def test_simple_grpc_aio_infer_client(server: ServerProcess) -> None:
    in0, in1 = simple_data()

    async def main() -> None:
        client = grpcaio.InferenceServerClient(url=server.grpc_url)
        try:
            inputs = simple_inputs(grpcaio, in0, in1)
            result = await client.infer(model_name="simple", inputs=inputs, outputs=_grpc_outputs(grpcaio),
                                        client_timeout=None, headers={"test": "1"}, compression_algorithm=None)
            assert len((await client.get_inference_statistics(model_name="simple")).model_stats) == 1
            check_sum_and_difference(result, in0, in1)
            both = await asyncio.gather(client.infer(model_name="simple", inputs=inputs, outputs=None),
                                        client.infer(model_name="simple", inputs=inputs, outputs=None))
            for one in both:
                check_sum_and_difference(one, in0, in1)
        finally:
            await client.close()

    asyncio.run(main())


def test_simple_http_aio_infer_client(server: ServerProcess) -> None:
    in0, in1 = simple_data(-1)

    async def infer(client: httpaio.InferenceServerClient, model: str, outputs: bool) -> Any:
        inputs = simple_inputs(httpaio, in0, in1, binary=(False, True))
        requested = [httpaio.InferRequestedOutput("OUTPUT0", binary_data=True),
                     httpaio.InferRequestedOutput("OUTPUT1", binary_data=False)] if outputs else None
        return await client.infer(model, inputs, outputs=requested, query_params={"test_1": 1, "test_2": 2})

    async def main() -> None:
        client = httpaio.InferenceServerClient(url=server.http_url)
        try:
            result = await infer(client, "simple", outputs=True)
            assert len((await client.get_inference_statistics(model_name="simple"))["model_stats"]) == 1
            check_sum_and_difference(result, in0, in1)
            check_sum_and_difference(await infer(client, "simple", outputs=False), in0, in1)
            with pytest.raises(InferenceServerException) as wrong:
                await infer(client, "wrong_model_name", outputs=True)
            assert wrong.value.message().startswith("Request for unknown model"), wrong.value
            for one in await asyncio.gather(infer(client, "simple", True), infer(client, "simple", False)):
                check_sum_and_difference(one, in0, in1)
        finally:
            await client.close()

    asyncio.run(main())


CHANNEL_ARGS = [
    ("grpc.max_send_message_length", 1024 * 1024), ("grpc.max_receive_message_length", 1024 * 1024),
    ("grpc.keepalive_time_ms", 2**31 - 1), ("grpc.keepalive_timeout_ms", 20000),
    ("grpc.keepalive_permit_without_calls", False), ("grpc.http2.max_pings_without_data", 2),
    ("grpc.dns_enable_srv_queries", 1),
]


def test_simple_grpc_custom_args_client(server: ServerProcess) -> None:
    in0, in1 = simple_data()
    with grpcclient.InferenceServerClient(url=server.grpc_url, channel_args=CHANNEL_ARGS) as client:
        result = client.infer(model_name="simple", inputs=simple_inputs(grpcclient, in0, in1),
                              outputs=_grpc_outputs(), headers={"test": "1"})
    check_sum_and_difference(result, in0, in1)


def test_simple_grpc_aio_custom_args_client(server: ServerProcess) -> None:
    in0, in1 = simple_data()

    async def main() -> Any:
        client = grpcaio.InferenceServerClient(url=server.grpc_url, channel_args=CHANNEL_ARGS)
        try:
            return await client.infer(model_name="simple", inputs=simple_inputs(grpcaio, in0, in1),
                                      outputs=_grpc_outputs(grpcaio), headers={"test": "1"})
        finally:
            await client.close()

    check_sum_and_difference(asyncio.run(main()), in0, in1)


def _keepalive(module: Any) -> Any:
    return module.KeepAliveOptions(keepalive_time_ms=2**31 - 1, keepalive_timeout_ms=20000,
                                   keepalive_permit_without_calls=False, http2_max_pings_without_data=2)


def test_simple_grpc_keepalive_client(server: ServerProcess) -> None:
    in0, in1 = simple_data()
    with grpcclient.InferenceServerClient(url=server.grpc_url, keepalive_options=_keepalive(grpcclient)) as client:
        result = client.infer(model_name="simple", inputs=simple_inputs(grpcclient, in0, in1),
                              outputs=_grpc_outputs(), headers={"test": "1"})
    check_sum_and_difference(result, in0, in1)


def test_simple_grpc_aio_keepalive_client(server: ServerProcess) -> None:
    in0, in1 = simple_data()

    async def main() -> Any:
        client = grpcaio.InferenceServerClient(url=server.grpc_url, keepalive_options=_keepalive(grpcaio))
        try:
            return await client.infer(model_name="simple", inputs=simple_inputs(grpcaio, in0, in1),
                                      outputs=_grpc_outputs(grpcaio), headers={"test": "1"})
        finally:
            await client.close()

    check_sum_and_difference(asyncio.run(main()), in0, in1)


def _explicit_request(model: str, datatype: str) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=model, model_version="")
    for name, values in (("INPUT0", list(range(16))), ("INPUT1", [1] * 16)):
        tensor = request.inputs.add(name=name, datatype=datatype, shape=[1, 16])
        tensor.contents.int_contents[:] = values
    request.outputs.add(name="OUTPUT0")
    request.outputs.add(name="OUTPUT1")
    return request


def _explicit_results(response: service_pb2.ModelInferResponse, dtype: Any) -> list[Any]:
    return [np.resize(np.frombuffer(response.raw_output_contents[i], dtype=dtype), list(out.shape))
            for i, out in enumerate(response.outputs)]


@pytest.mark.parametrize(("model", "datatype", "dtype"), [("simple", "INT32", np.int32), ("simple_int8", "INT8", np.int8)])
def test_grpc_explicit_int_and_int8_content_clients(server: ServerProcess, model: str, datatype: str, dtype: Any) -> None:
    """grpc_explicit_int_content_client (simple) and grpc_explicit_int8_content_client (simple_int8)."""
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = _explicit_request(model, datatype)
        results = _explicit_results(stub.ModelInfer(request), dtype)
        assert len(results) == 2
        for i in range(16):
            assert i + 1 == results[0][0][i] and i - 1 == results[1][0][i], results
        if model == "simple":  # contents and raw_input_contents together are refused
            request.raw_input_contents.extend([np.array(list(range(8))).tobytes()])
            request.inputs[0].contents.int_contents[:] = list(range(8, 16))
            expected = ("contents field must not be specified when using raw_input_contents for 'INPUT0' "
                        "for model 'simple'")
        else:  # a version that is no number is refused
            request.model_version = "wrong_specification"
            expected = "failed to get model version from specified version string 'wrong_specification'"
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(request)
        assert expected in str(refused.value), refused.value


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_memory_growth_test(server: ServerProcess, protocol: str) -> None:
    """memory_growth_test: a new client per inference on custom_identity_int32 (20 repetitions, not 100)."""
    data = np.expand_dims(np.arange(16, dtype=np.int32), 0)
    for _ in range(20):
        if protocol == "grpc":
            client: Any = grpcclient.InferenceServerClient(server.grpc_url)
            inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32")]
            inputs[0].set_data_from_numpy(data)
            outputs: list[Any] = [grpcclient.InferRequestedOutput("OUTPUT0")]
        else:
            client = httpclient.InferenceServerClient(server.http_url)
            inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32")]
            inputs[0].set_data_from_numpy(data, binary_data=True)
            outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
        try:
            out = client.infer(model_name="custom_identity_int32", inputs=inputs, outputs=outputs).as_numpy("OUTPUT0")
        finally:
            client.close()
        assert out.dtype == data.dtype and out.shape == data.shape and np.array_equal(out, data)

