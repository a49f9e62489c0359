"""NVIDIA's BYTES examples, as the project's tests, against ours and the real Triton:
simple_{grpc,http}_string_infer_client, simple_{grpc,http}_aio_string_infer_client and
grpc_explicit_byte_content_client (models simple_string and simple_identity)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from tritonclient import utils
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.integration.triton_examples.support import serve
from tests.support.server_process import ServerProcess

MODELS = ("simple_string", "simple_identity")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with serve(tmp_path_factory.mktemp("examples"), MODELS) as pair:
        yield pair


def _as_text(values: Any) -> Any:
    return np.array([str(x).encode("utf-8") for x in values.reshape(values.size)], dtype=np.object_).reshape(values.shape)


IN0 = np.expand_dims(np.arange(16, dtype=np.int32), 0)
IN1 = np.ones((1, 16), dtype=np.int32)
NULL_CHARS = np.array([b"he\x00llo" for _ in range(16)], dtype=np.object_).reshape([1, 16])
BLOBS = np.array([b"\x00\x01\x02\x03" for _ in range(16)], dtype=np.bytes_).reshape([1, 16])


def _string_inputs(module: Any, binary: tuple[bool, bool] | None = None) -> list[Any]:
    inputs = [module.InferInput("INPUT0", [1, 16], "BYTES"), module.InferInput("INPUT1", [1, 16], "BYTES")]
    for tensor, data, flag in zip(inputs, (_as_text(IN0), _as_text(IN1)), binary or (None, None), strict=True):
        tensor.set_data_from_numpy(data) if flag is None else tensor.set_data_from_numpy(data, binary_data=flag)
    return inputs


def _check_strings(result: Any) -> None:
    out0, out1 = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    for i in range(16):
        assert (IN0 + IN1)[0][i] == int(out0[0][i]) and (IN0 - IN1)[0][i] == int(out1[0][i]), (out0, out1)


def _check_identity(sent: Any, result: Any, json_bytes: bool = False) -> None:
    got = result.as_numpy("OUTPUT0")
    if sent.dtype == np.object_ and json_bytes:  # JSON data comes back as text: the example re-encodes it
        got = np.array([bytes(str(x), encoding="utf-8") for x in got.flatten()], dtype=np.object_).reshape([1, 16])
        assert np.array_equal(sent, got), got
    elif sent.dtype == np.object_:
        assert np.array_equal(sent, got), got
    else:
        assert np.array_equal(sent, np.char.encode(got.astype(str))), got


def _identity_inputs(module: Any, data: Any, binary: bool | None = None) -> list[Any]:
    tensor = module.InferInput("INPUT0", list(data.shape), "BYTES")
    tensor.set_data_from_numpy(data) if binary is None else tensor.set_data_from_numpy(data, binary_data=binary)
    return [tensor]


def test_simple_grpc_string_infer_client(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        outputs = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT1")]
        _check_strings(client.infer(model_name="simple_string", inputs=_string_inputs(grpcclient), outputs=outputs))
        for data in (NULL_CHARS, BLOBS):
            result = client.infer(model_name="simple_identity", inputs=_identity_inputs(grpcclient, data),
                                  outputs=[grpcclient.InferRequestedOutput("OUTPUT0")])
            _check_identity(data, result)


def test_simple_http_string_infer_client(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
                   httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)]
        _check_strings(client.infer(model_name="simple_string", inputs=_string_inputs(httpclient, (True, False)),
                                    outputs=outputs))
        for data in (NULL_CHARS, BLOBS):
            for binary in (True, False):
                result = client.infer(model_name="simple_identity", inputs=_identity_inputs(httpclient, data, binary),
                                      outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)])
                _check_identity(data, result, json_bytes=not binary)
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_simple_aio_string_infer_clients(server: ServerProcess, protocol: str) -> None:
    """simple_grpc_aio_string_infer_client and simple_http_aio_string_infer_client."""
    module: Any = grpcaio if protocol == "grpc" else httpaio

    async def main() -> None:
        client = module.InferenceServerClient(url=server.grpc_url if protocol == "grpc" else server.http_url)
        try:
            outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT1")]
            _check_strings(await client.infer(model_name="simple_string", inputs=_string_inputs(module),
                                              outputs=outputs))
            for data in (NULL_CHARS, BLOBS):
                result = await client.infer(model_name="simple_identity", inputs=_identity_inputs(module, data),
                                            outputs=[module.InferRequestedOutput("OUTPUT0")])
                _check_identity(data, result)
        finally:
            await client.close()

    asyncio.run(main())


def test_grpc_explicit_byte_content_client(server: ServerProcess) -> None:
    request = service_pb2.ModelInferRequest(model_name="simple_string", model_version="")
    for name, values in (("INPUT0", [f"{i}".encode() for i in range(16)]), ("INPUT1", [b"1"] * 16)):
        request.inputs.add(name=name, datatype="BYTES", shape=[1, 16]).contents.bytes_contents.extend(values)
    request.outputs.add(name="OUTPUT0")
    request.outputs.add(name="OUTPUT1")
    with grpc.insecure_channel(server.grpc_url) as channel:
        response = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    results = [np.resize(utils.deserialize_bytes_tensor(response.raw_output_contents[i]), list(out.shape))
               for i, out in enumerate(response.outputs)]
    assert len(results) == 2
    for i in range(16):
        assert i + 1 == int(results[0][0][i]) and i - 1 == int(results[1][0][i]), results
