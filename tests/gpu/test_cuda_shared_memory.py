"""On a real GPU: Triton's CUDA shared memory extension as simple_*_cudashm_client use it (skipped without one).

The client allocates device memory, shares it through a cudaIpc handle (tritonclient.utils.cuda_shared_memory),
registers it over gRPC or HTTP, and infers with inputs and outputs there; the server opens the handle through
cuda-python, reads the inputs to the host and writes the outputs back to the device.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from ensemble_runtime.gpu.cuda import CudaRuntime
from tritonclient.utils import InferenceServerException

from tests.integration.shm import repo
from tests.support.runtime_process import RuntimeProcess

pytestmark = pytest.mark.gpu
PROTOCOLS: dict[str, ModuleType] = {"grpc": grpcclient, "http": httpclient}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, cuda: CudaRuntime) -> Iterator[RuntimeProcess]:
    root = repo.build(tmp_path_factory.mktemp("cudashm"))
    with RuntimeProcess([Path(root)]) as proc:
        proc.wait_ready(timeout=120)
        yield proc


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_cuda_shm_client(server: RuntimeProcess, protocol: str) -> None:
    import tritonclient.utils.cuda_shared_memory as cudashm

    module = PROTOCOLS[protocol]
    client: Any = server.grpc_client() if protocol == "grpc" else server.http_client()
    in0, in1 = np.arange(16, dtype=np.int32), np.ones(16, dtype=np.int32)
    size = in0.nbytes
    handles = {name: cudashm.create_shared_memory_region(name, size, 0) for name in ("i0", "i1", "o0", "o1")}
    try:
        cudashm.set_shared_memory_region(handles["i0"], [in0])
        cudashm.set_shared_memory_region(handles["i1"], [in1])
        for name, handle in handles.items():
            client.register_cuda_shared_memory(name, cudashm.get_raw_handle(handle), 0, size)
        inputs = [module.InferInput(f"INPUT{i}", [1, 16], "INT32") for i in (0, 1)]
        outputs = [module.InferRequestedOutput(f"OUTPUT{i}") for i in (0, 1)]
        for i in (0, 1):
            inputs[i].set_shared_memory(f"i{i}", size)
            outputs[i].set_shared_memory(f"o{i}", size)
        client.infer("simple", inputs, outputs=outputs)
        np.testing.assert_array_equal(cudashm.get_contents_as_numpy(handles["o0"], np.int32, [1, 16]), [in0 + in1])
        np.testing.assert_array_equal(cudashm.get_contents_as_numpy(handles["o1"], np.int32, [1, 16]), [in0 - in1])
        status = client.get_cuda_shared_memory_status()
        names = [r["name"] for r in status] if protocol == "http" else list(status.regions)
        assert sorted(names) == ["i0", "i1", "o0", "o1"]
        with pytest.raises(InferenceServerException) as info:  # a size past the allocation: refused at register
            client.register_cuda_shared_memory("big", cudashm.get_raw_handle(handles["i0"]), 0, 1 << 30)
        assert "failed to register shared memory region" in info.value.message()
    finally:
        client.unregister_cuda_shared_memory()
        for handle in handles.values():
            cudashm.destroy_shared_memory_region(handle)
    status = client.get_cuda_shared_memory_status()
    assert (status if protocol == "http" else list(status.regions)) == []
