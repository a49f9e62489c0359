"""Shared memory behaviour only the runtime has to show (no peer comparison): regions unmapped in the server
process on unregister, a clean exit with regions registered, the `shared-memory` restricted-API category,
and many regions used at once (what perf_analyzer --shared-memory system does: one region per input and
output per concurrency slot)."""

from __future__ import annotations

import http.client
import json
import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.integration.shm.test_system_shared_memory import IN0, IN1, still_serves
from tests.support.runtime_process import RuntimeProcess

KEY, VALUE = "x-shm-token", "s3cret"


def _key() -> str:
    return f"/ens_test_{os.getpid()}_{uuid.uuid4().hex[:12]}"


def _maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_unregister_unmaps_in_the_server(ours: RuntimeProcess) -> None:
    key = _key()
    handle = shm.create_shared_memory_region("unmap", key, 64)
    try:
        client = ours.grpc_client()
        client.register_system_shared_memory("unmap", key, 64)
        assert f"/dev/shm{key}" in _maps(ours.pid)
        client.unregister_system_shared_memory("unmap")
        assert f"/dev/shm{key}" not in _maps(ours.pid)
    finally:
        shm.destroy_shared_memory_region(handle)
    still_serves(ours, "grpc")


def test_exit_with_regions_registered(repository: Path) -> None:
    key = _key()
    handle = shm.create_shared_memory_region("at_exit", key, 128)
    try:
        with RuntimeProcess([repository]) as proc:
            proc.wait_ready(timeout=120)
            proc.http_client().register_system_shared_memory("at_exit", key, 128)
            assert f"/dev/shm{key}" in _maps(proc.pid)
            rc = proc.stop()
        assert rc == 0, proc.log_text()[-2000:]
        assert "Traceback" not in proc.log_text()
    finally:
        shm.destroy_shared_memory_region(handle)


@pytest.fixture(scope="module")
def restricted(repository: Path) -> Iterator[RuntimeProcess]:
    args = [f"--grpc-restricted-protocol=shared-memory:{KEY}={VALUE}", f"--http-restricted-api=shared-memory:{KEY}={VALUE}"]
    with RuntimeProcess([repository], args) as proc:
        proc.wait_ready(timeout=120)
        yield proc


@pytest.mark.parametrize("rpc,request_", [
    ("SystemSharedMemoryStatus", service_pb2.SystemSharedMemoryStatusRequest()),
    ("SystemSharedMemoryRegister", service_pb2.SystemSharedMemoryRegisterRequest(name="r", key="/k", byte_size=4)),
    ("SystemSharedMemoryUnregister", service_pb2.SystemSharedMemoryUnregisterRequest()),
    ("CudaSharedMemoryStatus", service_pb2.CudaSharedMemoryStatusRequest()),
    ("CudaSharedMemoryRegister", service_pb2.CudaSharedMemoryRegisterRequest(name="r", byte_size=4)),
    ("CudaSharedMemoryUnregister", service_pb2.CudaSharedMemoryUnregisterRequest()),
])
def test_grpc_shared_memory_is_a_restricted_category(restricted: RuntimeProcess, rpc: str, request_: Any) -> None:
    with grpc.insecure_channel(restricted.grpc_url) as channel:
        call = getattr(service_pb2_grpc.GRPCInferenceServiceStub(channel), rpc)
        with pytest.raises(grpc.RpcError) as info:
            call(request_, timeout=30)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert info.value.details() == f"This protocol is restricted, expecting header 'triton-grpc-protocol-{KEY}'"
        if "Status" in rpc or "Unregister" in rpc:
            call(request_, timeout=30, metadata=[(f"triton-grpc-protocol-{KEY}", VALUE)])
    still_serves(restricted, "grpc")


@pytest.mark.parametrize("method,path", [
    ("GET", "/v2/systemsharedmemory/status"), ("GET", "/v2/systemsharedmemory/region/r/status"),
    ("POST", "/v2/systemsharedmemory/region/r/register"), ("POST", "/v2/systemsharedmemory/unregister"),
    ("POST", "/v2/systemsharedmemory/region/r/unregister"),
    ("GET", "/v2/cudasharedmemory/status"), ("GET", "/v2/cudasharedmemory/region/r/status"),
    ("POST", "/v2/cudasharedmemory/region/r/register"), ("POST", "/v2/cudasharedmemory/unregister"),
    ("POST", "/v2/cudasharedmemory/region/r/unregister"),
])
def test_http_shared_memory_is_a_restricted_category(restricted: RuntimeProcess, method: str, path: str) -> None:
    def call(headers: dict[str, str]) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(restricted.http_url, timeout=30)
        try:
            conn.request(method, path, body=b"{}" if method == "POST" else None, headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    status, body = call({})
    assert (status, json.loads(body)) == (403, {"error": f"This API is restricted, expecting header '{KEY}'"})
    status, body = call({KEY: VALUE})
    assert status != 403, body
    still_serves(restricted, "http")


def test_many_regions_at_once(ours: RuntimeProcess) -> None:
    """16 concurrency slots, each with its own 4 regions (2 inputs, 2 outputs), 5 requests each, gRPC and
    HTTP alternately: every answer lands in its own slot's regions."""
    slots, size = 16, IN0.nbytes
    handles: dict[str, Any] = {}
    client = ours.grpc_client()
    try:
        for slot in range(slots):
            for tensor in ("in0", "in1", "out0", "out1"):
                name = f"slot{slot}_{tensor}"
                key = _key()
                handles[name] = shm.create_shared_memory_region(name, key, size)
                client.register_system_shared_memory(name, key, size)
            shm.set_shared_memory_region(handles[f"slot{slot}_in0"], [IN0 * slot])
            shm.set_shared_memory_region(handles[f"slot{slot}_in1"], [IN1])

        def run(slot: int) -> None:
            for round_ in range(5):
                module: Any = grpcclient if (slot + round_) % 2 else httpclient
                caller = ours.grpc_client() if module is grpcclient else ours.http_client()
                inputs = [module.InferInput(f"INPUT{i}", [1, 16], "INT32") for i in (0, 1)]
                outputs = [module.InferRequestedOutput(f"OUTPUT{i}") for i in (0, 1)]
                for i in (0, 1):
                    inputs[i].set_shared_memory(f"slot{slot}_in{i}", size)
                    outputs[i].set_shared_memory(f"slot{slot}_out{i}", size)
                caller.infer("simple", inputs, outputs=outputs)
                got = shm.get_contents_as_numpy(handles[f"slot{slot}_out0"], np.int32, [16])
                np.testing.assert_array_equal(got, IN0 * slot + IN1)

        with ThreadPoolExecutor(slots) as pool:
            list(pool.map(run, range(slots)))
        assert len(client.get_system_shared_memory_status(as_json=True)["regions"]) == slots * 4
    finally:
        client.unregister_system_shared_memory()
        for handle in handles.values():
            shm.destroy_shared_memory_region(handle)
    still_serves(ours, "http")


def test_stream_reads_and_writes_shared_memory(ours: RuntimeProcess) -> None:
    """ModelStreamInfer takes inputs from and writes outputs into registered regions, as ModelInfer does."""
    size = IN0.nbytes
    keys = {"stream_in": _key(), "stream_out": _key()}
    handles = {name: shm.create_shared_memory_region(name, key, size * 2) for name, key in keys.items()}
    results: list[Any] = []
    client = ours.grpc_client()
    try:
        shm.set_shared_memory_region(handles["stream_in"], [IN0, IN1])
        for name, key in keys.items():
            client.register_system_shared_memory(name, key, size * 2)
        inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_shared_memory("stream_in", size)
        inputs[1].set_shared_memory("stream_in", size, offset=size)
        outputs = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT1")]
        outputs[0].set_shared_memory("stream_out", size)
        outputs[1].set_shared_memory("stream_out", size, offset=size)
        client.start_stream(callback=lambda result, error: results.append(error or result))
        client.async_stream_infer("simple", inputs, outputs=outputs, request_id="s1")
        client.stop_stream()  # waits for the stream's responses
        assert len(results) == 1 and not isinstance(results[0], Exception), results
        assert results[0].get_response().id == "s1"
        for offset, expected in ((0, IN0 + IN1), (size, IN0 - IN1)):
            got = shm.get_contents_as_numpy(handles["stream_out"], np.int32, [1, 16], offset=offset)
            np.testing.assert_array_equal(got, expected.reshape(1, 16))
    finally:
        client.unregister_system_shared_memory()
        client.close()
        for handle in handles.values():
            shm.destroy_shared_memory_region(handle)
    still_serves(ours, "grpc")
