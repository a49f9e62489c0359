"""What the tests of the gRPC port's limits share: a runtime serving the integration repository on either front end,
raw sockets to its gRPC port, calls that send their HEADERS and never their message, and the check that it still
serves."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import hpack
import numpy as np
import pytest
from tritonclient.grpc import InferInput

from tests.support.runtime_process import RuntimeProcess
from tests.support.sockets import LOADED

# "native-on-loop": the native core with no threads of its own, driven by the event loop's thread
FRONTENDS = ["native", "native-on-loop", "grpcio"]
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty SETTINGS frame
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
MODEL_STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"


@contextmanager
def serving(repository: Path, frontend: str, flags: list[str]) -> Iterator[RuntimeProcess]:
    chosen = ["--grpc-frontend=native", "--grpc-native-threads=0"] if frontend == "native-on-loop" \
        else [f"--grpc-frontend={frontend}", "--grpc-native-threads=1"]
    with RuntimeProcess([repository], [*chosen, "--strict-readiness=false", *flags]) as proc:
        proc.wait_ready()
        proc.wait_model_ready("add_sub")
        yield proc


def native_only(proc: RuntimeProcess) -> None:
    if "--grpc-frontend=native" not in proc.args:
        pytest.skip("the native front end's limit (grpcio's front end has none)")


def connect(proc: RuntimeProcess, source: str = "") -> socket.socket:
    """A connection to the gRPC port from `source` (a loopback address; "": the system's choice)."""
    host, _, port = proc.grpc_url.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=LOADED, source_address=(source, 0))


def bodiless_calls(count: int, method: str = MODEL_INFER) -> bytes:
    """`count` calls that send their HEADERS and never their message (~15 bytes each once HPACK has the headers in
    its table), on streams 1, 3, 5, ..., after the preface and SETTINGS."""
    encoder = hpack.Encoder()
    fields = [(":method", "POST"), (":scheme", "http"), (":path", method),
              (":authority", "x"), ("content-type", "application/grpc"), ("te", "trailers")]
    wire = bytearray(PREFACE + SETTINGS)
    for n in range(count):
        block = encoder.encode(fields)
        wire += len(block).to_bytes(3, "big") + bytes([0x1, 0x4]) + (2 * n + 1).to_bytes(4, "big") + block
    return bytes(wire)


def frames(wire: bytes) -> list[tuple[int, int, bytes]]:
    """(type, stream, payload) of each whole HTTP/2 frame in `wire`."""
    found = []
    while len(wire) >= 9 and len(wire) >= 9 + (length := int.from_bytes(wire[:3], "big")):
        found.append((wire[3], int.from_bytes(wire[5:9], "big") & 0x7FFFFFFF, wire[9:9 + length]))
        wire = wire[9 + length:]
    return found


def still_serving(proc: RuntimeProcess) -> None:
    a = np.ones((1, 16), np.float32)
    with proc.grpc_client() as client:
        inputs = [InferInput(name, [1, 16], "FP32") for name in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT0"), a + a)
