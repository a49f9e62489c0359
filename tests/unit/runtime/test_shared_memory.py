"""The shared memory registry and tensor reads/writes: real POSIX regions under /dev/shm, no server.

What the integration tests cannot see from outside: keys never leave /dev/shm, a region is unmapped on
unregister and at close (and not under a view a request still holds), sizes come from the region and never
from a declared shape, the region count is bounded; CUDA regions through an opener (a host buffer standing in
for device memory: the window and copy logic is the same; the real cudaIpc path is tests/gpu's).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from ensemble_runtime.errors import ErrorCode, InferenceError
from ensemble_runtime.shared_memory import (
    Kind,
    SharedMemoryRegistry,
    ShmRef,
    output_refs,
    parse_ref,
    read_input,
    sends_to_shared_memory,
    write_output,
)
from ensemble_runtime.shared_memory.cuda_ipc import CudaIpcOpener
from ensemble_runtime.shared_memory.regions import shm_path


@pytest.fixture
def key() -> Iterator[str]:
    name = f"ens_unit_{os.getpid()}_{uuid.uuid4().hex[:12]}"
    path = Path("/dev/shm") / name
    path.write_bytes(bytes(range(256)) * 16)  # 4096 bytes
    yield "/" + name
    path.unlink(missing_ok=True)


def mapped(key: str) -> bool:
    return f"/dev/shm{key}" in Path("/proc/self/maps").read_text()


def code_of(call: object) -> tuple[ErrorCode, str]:
    assert callable(call)
    with pytest.raises(InferenceError) as info:
        call()
    return info.value.code, info.value.message


@pytest.mark.parametrize("bad", ["/", "", "/../etc/passwd", "/a/b", "..", "/.", "x" * 300, "/a\0b"])
def test_keys_never_leave_dev_shm(bad: str) -> None:
    code, message = code_of(lambda: shm_path(bad))
    assert code is ErrorCode.INTERNAL and message.startswith("Unable to open shared memory region: ")
    assert len(message) < 400


def test_register_maps_and_unregister_unmaps(key: str) -> None:
    registry = SharedMemoryRegistry()
    registry.register_system("r", key, 0, 4096)
    assert mapped(key)
    assert [(r.name, r.key, r.offset, r.byte_size) for r in registry.status(Kind.SYSTEM)] == [("r", key, 0, 4096)]
    registry.unregister(Kind.CUDA, "r")  # the other kind: untouched
    assert mapped(key)
    registry.unregister(Kind.SYSTEM, "r")
    assert not mapped(key) and registry.status(Kind.SYSTEM) == []


def test_close_unmaps_everything(key: str) -> None:
    registry = SharedMemoryRegistry()
    for i in range(3):
        registry.register_system(f"r{i}", key, i * 1024, 1024)
    registry.close()
    assert not mapped(key) and len(registry) == 0


def test_a_view_outlives_unregistration_safely(key: str) -> None:
    """A request still reading a region that is unregistered keeps valid bytes; the mapping goes with it."""
    registry = SharedMemoryRegistry()
    registry.register_system("r", key, 0, 64)
    array = read_input(registry, ShmRef("r", 0, 64), "x", "UINT8", (64,), "m")
    registry.unregister(Kind.SYSTEM)
    assert array.tolist() == list(range(64)) and not array.flags.writeable
    del array
    assert not mapped(key)


def test_unaligned_offsets_map(key: str) -> None:
    registry = SharedMemoryRegistry()
    registry.register_system("r", key, 100, 50)
    array = read_input(registry, ShmRef("r", 10, 4), "x", "UINT8", (4,), "m")
    assert array.tolist() == [110, 111, 112, 113]
    registry.close()


def test_register_checks(key: str) -> None:
    registry = SharedMemoryRegistry(max_regions=2)
    assert code_of(lambda: registry.register_system("r", key, 4000, 100)) == (
        ErrorCode.INVALID_ARGUMENT, "failed to register shared memory region 'r': invalid args")
    assert code_of(lambda: registry.register_system("r", key, 0, 0))[0] is ErrorCode.INVALID_ARGUMENT
    registry.register_system("a", key, 0, 16)
    assert code_of(lambda: registry.register_system("a", key, 0, 16)) == (
        ErrorCode.ALREADY_EXISTS, "shared memory region 'a' already in manager")
    registry.register_system("b", key, 0, 16)
    assert code_of(lambda: registry.register_system("c", key, 0, 16))[0] is ErrorCode.RESOURCE_EXHAUSTED
    long = "n" * 5000
    code, message = code_of(lambda: SharedMemoryRegistry().register_system(long, key, 0, 16))
    assert code is ErrorCode.INVALID_ARGUMENT and len(message) < 400
    registry.close()


def test_sizes_come_from_the_region_not_the_shape(key: str) -> None:
    registry = SharedMemoryRegistry()
    registry.register_system("r", key, 0, 64)
    assert code_of(lambda: read_input(registry, ShmRef("r", 0, 64), "x", "FP32", (2**40,), "m"))[0] is \
        ErrorCode.INVALID_ARGUMENT  # a huge declared shape: refused, nothing allocated
    assert code_of(lambda: read_input(registry, ShmRef("r", 0, 64), "x", "FP32", (8,), "m")) == (
        ErrorCode.INVALID_ARGUMENT, "input byte size mismatch for input 'x' for model 'm'. Expected 32, got 64")
    assert code_of(lambda: read_input(registry, ShmRef("r", 0, 64), "x", "BYTES", (2**30,), "m"))[0] is \
        ErrorCode.INVALID_ARGUMENT  # BYTES: elements only as the region's bytes prove them
    registry.close()


def test_outputs_written_and_bounded(key: str) -> None:
    registry = SharedMemoryRegistry()
    registry.register_system("r", key, 0, 64)
    write_output(registry, ShmRef("r", 8, 16), "y", np.arange(4, dtype=np.int32))
    assert np.frombuffer((Path("/dev/shm") / key[1:]).read_bytes()[8:24], np.int32).tolist() == [0, 1, 2, 3]
    code, message = code_of(lambda: write_output(registry, ShmRef("r", 0, 8), "y", np.arange(4, dtype=np.int32)))
    assert (code, message) == (ErrorCode.INTERNAL, "shared memory size specified with the request for output 'y' "
                               "(8 bytes) should be at least 16 bytes to hold the results")
    write_output(registry, ShmRef("r", 0, 64), "s", np.array([b"ab", b""], dtype=np.object_))
    assert (Path("/dev/shm") / key[1:]).read_bytes()[:10] == b"\x02\x00\x00\x00ab\x00\x00\x00\x00"
    registry.close()


@pytest.mark.parametrize(("params", "message"), [
    ({"shared_memory_offset": 0}, "'shared_memory_offset' can not be specified without 'shared_memory_region' "
                                  "parameter for tensor 't'"),
    ({"shared_memory_region": 1, "shared_memory_byte_size": 4},
     "invalid value type for 'shared_memory_region' parameter for tensor 't', expected string_param."),
    ({"shared_memory_region": "r"}, "'shared_memory_byte_size' must be specified along with "
                                    "'shared_memory_region' parameter for tensor 't'"),
    ({"shared_memory_region": "r", "shared_memory_byte_size": "4"},
     "invalid value type for 'shared_memory_byte_size' parameter for tensor 't', expected int64_param."),
    ({"shared_memory_region": "r", "shared_memory_byte_size": 4, "shared_memory_offset": -1},
     "'shared_memory_offset' parameter for tensor 't' must not be negative, got -1"),
])
def test_parameters_checked(params: dict[str, bool | int | float | str], message: str) -> None:
    assert code_of(lambda: parse_ref("t", params)) == (ErrorCode.INVALID_ARGUMENT, message)


class HostBackedDevice:
    """Stands in for an opened CUDA IPC allocation: the same read/write/close calls over host bytes."""

    def __init__(self, size: int) -> None:
        self.memory = bytearray(size)
        self.closed = False

    def read(self, offset: int, size: int) -> bytes:
        return bytes(self.memory[offset : offset + size])

    def write(self, offset: int, data: memoryview) -> None:
        self.memory[offset : offset + len(data)] = data

    def close(self) -> None:
        self.closed = True


def test_cuda_regions_through_the_opener() -> None:
    opened: list[HostBackedDevice] = []

    def opener(name: str, handle: bytes, device_id: int, size: int) -> HostBackedDevice:
        opened.append(HostBackedDevice(size))
        return opened[-1]

    registry = SharedMemoryRegistry(opener)
    registry.register_cuda("c", b"\0" * 64, 0, 64)
    [region] = registry.status(Kind.CUDA)
    assert (region.name, region.device_id, region.byte_size) == ("c", 0, 64)
    assert code_of(lambda: registry.status(Kind.SYSTEM, "c")) == (
        ErrorCode.NOT_FOUND, "The region named 'c' is registered as CUDA shared memory, not system shared memory")
    write_output(registry, ShmRef("c", 16, 16), "y", np.arange(4, dtype=np.float32))
    got = read_input(registry, ShmRef("c", 16, 16), "x", "FP32", (4,), "m")
    assert got.tolist() == [0.0, 1.0, 2.0, 3.0]
    registry.unregister(Kind.CUDA)
    assert opened[0].closed and registry.status(Kind.CUDA) == []


def test_cuda_without_a_gpu_is_refused_clearly() -> None:
    code, message = code_of(lambda: SharedMemoryRegistry().register_cuda("c", b"\0" * 64, 0, 64))
    assert (code, message) == (ErrorCode.INVALID_ARGUMENT,
                               "failed to register CUDA shared memory region 'c': GPUs not supported")


def test_cuda_opener_without_cuda_python_or_gpu_is_refused_clearly() -> None:
    registry = SharedMemoryRegistry(CudaIpcOpener())
    assert code_of(lambda: registry.register_cuda("c", b"\0" * 3, 0, 64)) == (
        ErrorCode.INVALID_ARGUMENT, "failed to register shared memory region: invalid args")  # not a handle
    code, message = code_of(lambda: registry.register_cuda("c", b"\0" * 64, 0, 64))
    assert code is ErrorCode.INVALID_ARGUMENT
    assert message.startswith("failed to register CUDA shared memory region 'c': GPUs not supported") or \
        message == "failed to register shared memory region: invalid args"  # cuda-python there, handle not valid
    assert registry.status(Kind.CUDA) == []


@pytest.mark.parametrize("outputs", [
    {},
    {"a": {}, "b": {"binary_data": True}},
    {"a": {}, "b": {"shared_memory_region": "r", "shared_memory_byte_size": 4}},
    {"a": {"shared_memory_region": "r", "shared_memory_byte_size": 4, "shared_memory_offset": 4}},
])
def test_sends_to_shared_memory_agrees_with_output_refs(outputs: dict[str, dict[str, bool | int | float | str]]) -> None:
    assert sends_to_shared_memory(outputs) == bool(output_refs(outputs))
