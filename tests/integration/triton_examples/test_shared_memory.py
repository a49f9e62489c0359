"""NVIDIA's system shared memory examples, as the project's tests, against ours and the real Triton:
simple_{grpc,http}_shm_client, simple_{grpc,http}_shm_string_client and reuse_infer_objects_client (gRPC and
HTTP). Region names and keys are unique per run, so runs and other tests never share a region."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient import utils

from bench.triton_peer import TritonPeer
from tests.integration.triton_examples.support import serve
from tests.support.peer_shm import unregister_system
from tests.support.server_process import ServerProcess

MODELS = ("simple", "simple_string")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with serve(tmp_path_factory.mktemp("examples"), MODELS) as pair:
        yield pair


class _Regions:
    """Regions created here and registered with the server; all released at the end."""

    def __init__(self, server: ServerProcess, protocol: str) -> None:
        self.client, self.tag = _client(server, protocol), uuid.uuid4().hex[:12]
        self.peer = isinstance(server, TritonPeer)
        self.handles: list[Any] = []

    def create(self, name: str, size: int) -> Any:
        key = f"/{name}_{self.tag}"
        handle = shm.create_shared_memory_region(f"{name}_{self.tag}", key, size)
        self.handles.append(handle)
        return handle

    def register(self, name: str, size: int) -> str:
        self.client.register_system_shared_memory(f"{name}_{self.tag}", f"/{name}_{self.tag}", size)
        return f"{name}_{self.tag}"

    def close(self) -> None:
        try:
            unregister_system(self.client, peer=self.peer)
        finally:
            for handle in self.handles:
                shm.destroy_shared_memory_region(handle)
            self.client.close()


def text(values: Any) -> Any:
    return np.array([str(x).encode("utf-8") for x in values.flatten()], dtype=object)


def _client(server: ServerProcess, protocol: str) -> Any:
    return server.grpc_client() if protocol == "grpc" else server.http_client()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_simple_shm_client(request: pytest.FixtureRequest, server: ServerProcess, protocol: str) -> None:
    """simple_grpc_shm_client / simple_http_shm_client: one region for both inputs, one for both outputs."""
    module: Any = grpcclient if protocol == "grpc" else httpclient
    regions = _Regions(server, protocol)
    try:
        regions.client.unregister_system_shared_memory()
        in0, in1 = np.arange(16, dtype=np.int32), np.ones(16, dtype=np.int32)
        size = in0.size * in0.itemsize
        out_handle = regions.create("output_data", size * 2)
        out_name = regions.register("output_data", size * 2)
        in_handle = regions.create("input_data", size * 2)
        shm.set_shared_memory_region(in_handle, [in0])
        shm.set_shared_memory_region(in_handle, [in1], offset=size)
        in_name = regions.register("input_data", size * 2)
        inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_shared_memory(in_name, size)
        inputs[1].set_shared_memory(in_name, size, offset=size)
        outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT1")]
        outputs[0].set_shared_memory(out_name, size)
        outputs[1].set_shared_memory(out_name, size, offset=size)
        results = regions.client.infer(model_name="simple", inputs=inputs, outputs=outputs)
        got = []
        for index, name in enumerate(("OUTPUT0", "OUTPUT1")):
            output = results.get_output(name)
            assert output is not None, f"{name} is missing in the response"
            datatype, shape = (output.datatype, output.shape) if protocol == "grpc" else (output["datatype"], output["shape"])
            got.append(shm.get_contents_as_numpy(out_handle, utils.triton_to_np_dtype(datatype), shape,
                                                 offset=index * size))
        assert np.array_equal(got[0][0], in0 + in1) and np.array_equal(got[1][0], in0 - in1), got
        assert regions.client.get_system_shared_memory_status() is not None
    finally:
        regions.close()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_simple_shm_string_client(request: pytest.FixtureRequest, server: ServerProcess, protocol: str) -> None:
    """simple_grpc_shm_string_client / simple_http_shm_string_client: serialized BYTES in one region each."""
    module: Any = grpcclient if protocol == "grpc" else httpclient
    regions = _Regions(server, protocol)
    try:
        in0, in1 = np.arange(16, dtype=np.int32), np.ones(16, dtype=np.int32)
        expected = [text(in0 + in1), text(in0 - in1)]
        serialized_in = [utils.serialize_byte_tensor(text(in0)), utils.serialize_byte_tensor(text(in1))]
        in_sizes = [utils.serialized_byte_size(s) for s in serialized_in]
        out_sizes = [utils.serialized_byte_size(utils.serialize_byte_tensor(e)) for e in expected]
        out_handles = [regions.create(f"output{i}_data", out_sizes[i]) for i in range(2)]
        out_names = [regions.register(f"output{i}_data", out_sizes[i]) for i in range(2)]
        in_handles = [regions.create(f"input{i}_data", in_sizes[i]) for i in range(2)]
        for handle, data in zip(in_handles, serialized_in, strict=True):
            shm.set_shared_memory_region(handle, [data])
        in_names = [regions.register(f"input{i}_data", in_sizes[i]) for i in range(2)]
        inputs = [module.InferInput(f"INPUT{i}", [1, 16], "BYTES") for i in range(2)]
        for tensor, name, size in zip(inputs, in_names, in_sizes, strict=True):
            tensor.set_shared_memory(name, size)
        kwargs = {} if protocol == "grpc" else {"binary_data": True}
        outputs = [module.InferRequestedOutput(f"OUTPUT{i}", **kwargs) for i in range(2)]
        for tensor, name, size in zip(outputs, out_names, out_sizes, strict=True):
            tensor.set_shared_memory(name, size)
        results = regions.client.infer(model_name="simple_string", inputs=inputs, outputs=outputs)
        for index in range(2):
            output = results.get_output(f"OUTPUT{index}")
            assert output is not None
            datatype, shape = (output.datatype, output.shape) if protocol == "grpc" else (output["datatype"], output["shape"])
            got = shm.get_contents_as_numpy(out_handles[index], utils.triton_to_np_dtype(datatype), shape)
            assert list(got[0]) == list(expected[index]), got
    finally:
        regions.close()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_reuse_infer_objects_client(request: pytest.FixtureRequest, server: ServerProcess, protocol: str) -> None:
    """The same InferInput / InferRequestedOutput objects used with shared memory, without, and with again."""
    module: Any = grpcclient if protocol == "grpc" else httpclient
    regions = _Regions(server, protocol)
    try:
        regions.client.unregister_system_shared_memory()
        in0, in1 = np.arange(16, dtype=np.int32), np.ones(16, dtype=np.int32)
        size = in0.size * in0.itemsize
        out_handles = [regions.create(f"output{i}_data", size) for i in range(2)]
        out_names = [regions.register(f"output{i}_data", size) for i in range(2)]
        in_handles = [regions.create(f"input{i}_data", size) for i in range(2)]
        shm.set_shared_memory_region(in_handles[0], [in0])
        shm.set_shared_memory_region(in_handles[1], [in1])
        in_names = [regions.register(f"input{i}_data", size) for i in range(2)]
        inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
        outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT1")]
        for use_shm in (True, False, True):
            second = in1 if use_shm else in1 * 2
            if use_shm:
                for tensor, name in zip([*inputs, *outputs], [*in_names, *out_names], strict=True):
                    tensor.set_shared_memory(name, size)
            else:
                inputs[0].set_data_from_numpy(np.expand_dims(in0, 0))
                inputs[1].set_data_from_numpy(np.expand_dims(second, 0))
                for output in outputs:
                    output.unset_shared_memory()
            results = regions.client.infer(model_name="simple", inputs=inputs, outputs=outputs)
            got = []
            for index, name in enumerate(("OUTPUT0", "OUTPUT1")):
                output = results.get_output(name)
                assert output is not None, f"{name} is missing in the response"
                if use_shm:
                    datatype, shape = (output.datatype, output.shape) if protocol == "grpc" \
                        else (output["datatype"], output["shape"])
                    got.append(shm.get_contents_as_numpy(out_handles[index], utils.triton_to_np_dtype(datatype), shape))
                else:
                    got.append(results.as_numpy(name))
            assert np.array_equal(got[0][0], in0 + second) and np.array_equal(got[1][0], in0 - second), got
    finally:
        regions.close()
