"""A stream whose client never reads: its responses wait for the client instead of piling up in the server.

A raw gRPC client opens ModelStreamInfer to a decoupled model that answers each request with several copies of
its input, keeps offering requests and reads nothing. Each front end must stop taking the stream's requests
once its in-flight limit and its response window are full (HTTP/2 flow control then stops the client), so the
server's resident memory stays within a bound derived from the bytes the client managed to send, while a
second client on another stream is still answered.

Requests of up to 64 KiB to such a model are answered without a task through the native core (the model's thread
sends each response: `protocol.stream_direct`), larger ones by a task per request: both are run.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tests.integration.decoupled.streams import Stream, tensor
from tests.support.runtime_process import RuntimeProcess

MODELS = Path(__file__).parent / "flow_models"
SIZE = 256 * 1024  # bytes per request; each response is as large
DIRECT_SIZE = 48 * 1024  # a request the native core's direct path takes (at most INLINE_BYTES)
COPIES = 4  # responses per request
OFFERED = 400  # requests the client offers (100 MiB): far more than the server may hold
MIB = 1024 * 1024
SLACK = 64 * MIB  # allocator and buffer noise on top of what the stream itself may hold
STALLED_ROUNDS = 40  # rounds of the second client during which the first sent nothing more


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class Offers:
    """The request iterator of the unread stream; counts the requests gRPC took from it."""

    def __init__(self, size: int) -> None:
        self.taken = 0
        self._size = size
        self._stop = threading.Event()
        self._request = pb.ModelInferRequest(model_name="echo_burst", id="unread")
        self._request.inputs.add(name="IN", datatype="UINT8", shape=[size])
        self._request.inputs.add(name="COUNT", datatype="UINT32", shape=[1])
        self._request.raw_input_contents.extend([bytes(size), np.array([COPIES], np.uint32).tobytes()])

    def __iter__(self) -> Iterator[pb.ModelInferRequest]:
        while self.taken < OFFERED and not self._stop.is_set():
            yield self._request
            self.taken += 1

    def stop(self) -> None:
        self._stop.set()

    @property
    def sent_bytes(self) -> int:
        return self.taken * self._size


def _answered(url: str) -> None:
    """A second client, on its own stream, gets its answer."""
    with Stream(url) as stream:
        stream.send("echo_burst", [tensor("IN", np.arange(8, dtype=np.uint8), "UINT8"),
                                   tensor("COUNT", np.array([1], np.uint32), "UINT32")], "other",
                    empty_final=True)
        got = stream.until_final()
        assert got[0].error is None and got[0].outputs["OUT"] == list(range(8))


@pytest.mark.parametrize(("frontend", "size"), [("native", SIZE), ("grpcio", SIZE), ("native", DIRECT_SIZE)],
                         ids=["native", "grpcio", "native-direct"])
def test_an_unread_stream_does_not_grow_the_server(frontend: str, size: int) -> None:
    args = [f"--grpc-frontend={frontend}", "--grpc-stream-max-in-flight=2", f"--grpc-max-message-bytes={4 * SIZE}"]
    with RuntimeProcess([MODELS], args) as server:
        server.wait_model_ready("echo_burst")
        _answered(server.grpc_url)
        baseline = _rss(server.pid)
        offers = Offers(size)
        limit = [("grpc.max_send_message_length", 4 * SIZE), ("grpc.max_receive_message_length", 4 * SIZE)]
        with grpc.insecure_channel(server.grpc_url, options=limit) as channel:
            call = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(iter(offers))
            try:
                stalled, last = 0, -1
                while stalled < STALLED_ROUNDS:  # until the client can send no more (work done, not a timer)
                    _answered(server.grpc_url)
                    taken = offers.taken
                    grown = _rss(server.pid) - baseline
                    assert grown <= SLACK + offers.sent_bytes // 2, (
                        f"{frontend}: the server grew by {grown // MIB} MiB for a client that sent "
                        f"{offers.sent_bytes // MIB} MiB and read nothing"
                    )
                    stalled = stalled + 1 if taken == last else 0
                    last = taken
                assert offers.taken < OFFERED, f"{frontend}: the server took every request of an unread stream"
            finally:
                offers.stop()
                call.cancel()
        _answered(server.grpc_url)
