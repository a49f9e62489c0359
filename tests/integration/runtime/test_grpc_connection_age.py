"""`--grpc-max-connection-age-secs`: a gRPC connection about that old (+-10%) goes with a GOAWAY, so its client
opens a new one for its next calls (which a Kubernetes Service may send to a replica added since; without it a
client's one connection stays on the replica it first reached) while the calls on the old one are answered and its
streams go on. Both front ends (grpc core's option on grpcio's); a client calling throughout loses no call."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tests.support import raw_grpc
from tests.support.grpc_port import FRONTENDS, native_only, serving
from tests.support.runtime_process import RuntimeProcess
from tests.support.sockets import LOADED, wait_closed

AGE_SECS = 1
GRACE_SECS = 1
CALLERS = 4  # calls from a few threads meet each GOAWAY on its way
SERVER_LIVE = "/inference.GRPCInferenceService/ServerLive"


@pytest.fixture(scope="module", params=FRONTENDS)
def aging_with_grace(request: pytest.FixtureRequest, repository: Path) -> Iterator[RuntimeProcess]:
    with serving(repository, request.param, [f"--grpc-max-connection-age-secs={AGE_SECS}",
                                             f"--grpc-max-connection-age-grace-secs={GRACE_SECS}"]) as proc:
        yield proc


@pytest.fixture(scope="module", params=FRONTENDS)
def aging(request: pytest.FixtureRequest, repository: Path) -> Iterator[RuntimeProcess]:
    with serving(repository, request.param, [f"--grpc-max-connection-age-secs={AGE_SECS}"]) as proc:
        yield proc


def _add_sub() -> pb.ModelInferRequest:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    request = pb.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        request.raw_input_contents.append(a.tobytes())
    return request


def test_a_connection_goes_at_its_age_with_a_goaway(aging: RuntimeProcess) -> None:
    live = [raw_grpc.frame(pb.ServerLiveRequest().SerializeToString())]
    with raw_grpc.RawConnection(aging.grpc_url, LOADED) as connection:
        opened = time.monotonic()
        assert connection.call(SERVER_LIVE, live).status == 0
        _, code = connection.goaway(LOADED)
        assert code == 0  # NO_ERROR: not a failure, a request to go
        assert time.monotonic() - opened >= 0.9 * AGE_SECS


def test_an_aged_connection_closes_once_told(aging: RuntimeProcess) -> None:
    """Native: the GOAWAY's PING left unanswered, the connection closes within the flush grace (5 s)."""
    native_only(aging)
    with raw_grpc.RawConnection(aging.grpc_url, LOADED) as connection:
        connection.goaway(LOADED)
        wait_closed(connection.sock, LOADED)


def test_a_call_sent_before_the_goaway_was_read_is_served(aging: RuntimeProcess) -> None:
    """Here sent after it, its PING not acknowledged. Served, as grpc core's server serves it: grpc core's client
    sends again only the calls the server's second GOAWAY leaves out, so a call refused REFUSED_STREAM failed (a
    grpcio client calling throughout lost one so, now and then, when the native front end refused them)."""
    live = [raw_grpc.frame(pb.ServerLiveRequest().SerializeToString())]
    with raw_grpc.RawConnection(aging.grpc_url, LOADED) as connection:
        connection.goaway(LOADED)
        answer = connection.call(SERVER_LIVE, live)
        assert answer.status == 0, answer
        assert pb.ServerLiveResponse.FromString(answer.data[5:]).live


def test_a_client_calling_throughout_loses_no_call(aging: RuntimeProcess) -> None:
    """A grpcio channel calling from a few threads for several ages: each GOAWAY sends its next calls to a new
    connection; a call it sent before reading one is served on the old, so every call is answered."""
    expected = (np.arange(16, dtype=np.float32) * 2).tobytes()
    until = time.monotonic() + 3.5 * AGE_SECS

    def calling(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> int:
        calls = 0
        while time.monotonic() < until:
            answer = stub.ModelInfer(_add_sub(), timeout=LOADED)
            assert answer.raw_output_contents[0] == expected
            assert stub.ServerLive(pb.ServerLiveRequest(), timeout=LOADED).live
            calls += 1
        return calls

    with grpc.insecure_channel(aging.grpc_url) as channel, ThreadPoolExecutor(CALLERS) as pool:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        callers = [pool.submit(calling, stub) for _ in range(CALLERS)]
        assert all(caller.result() > 10 for caller in callers)


def _stream(stub: service_pb2_grpc.GRPCInferenceServiceStub,
            ) -> tuple[queue.Queue[pb.ModelInferRequest | None], Iterator[pb.ModelStreamInferResponse]]:
    """A ModelStreamInfer: the queue its requests are put in (None ends them), and its responses."""
    requests: queue.Queue[pb.ModelInferRequest | None] = queue.Queue()

    def feed() -> Iterator[pb.ModelInferRequest]:
        while (request := requests.get()) is not None:
            yield request

    return requests, stub.ModelStreamInfer(feed(), timeout=LOADED)


def test_a_stream_open_at_its_age_goes_on(aging: RuntimeProcess) -> None:
    """A ModelStreamInfer open when its connection ages goes on until its client ends it, as under grpc core (its
    grace unbounded): answered after the GOAWAY, so a sequence over a stream is not cut off, while the channel's
    new calls go to a new connection. Before, the native front end ended it UNAVAILABLE once what it had read was
    answered."""
    expected = (np.arange(16, dtype=np.float32) * 2).tobytes()
    with grpc.insecure_channel(aging.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        requests, responses = _stream(stub)
        for _ in range(2):
            requests.put(_add_sub())
            answer = next(responses)
            assert not answer.error_message, answer.error_message
            assert answer.infer_response.raw_output_contents[0] == expected
            time.sleep(2.5 * AGE_SECS)  # the connection ages meanwhile
            assert stub.ServerLive(pb.ServerLiveRequest(), timeout=LOADED).live
        requests.put(None)
        assert list(responses) == []  # ended by its client, OK


def test_a_stream_open_at_its_age_ends_after_the_grace(aging_with_grace: RuntimeProcess) -> None:
    """With `--grpc-max-connection-age-grace-secs`, a stream of an aged connection goes on for the grace, then ends
    UNAVAILABLE once what it read is answered (native: naming the flags), so stream clients move to a new
    connection too (grpc core's max connection age grace)."""
    expected = (np.arange(16, dtype=np.float32) * 2).tobytes()
    with grpc.insecure_channel(aging_with_grace.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        requests, responses = _stream(stub)
        requests.put(_add_sub())
        assert next(responses).infer_response.raw_output_contents[0] == expected
        with pytest.raises(grpc.RpcError) as ended:
            next(responses)  # it ends by itself, within the age and the grace
        requests.put(None)
    assert ended.value.code() == grpc.StatusCode.UNAVAILABLE, ended.value
    if "--grpc-frontend=native" in aging_with_grace.args:
        assert "--grpc-max-connection-age-grace-secs" in str(ended.value.details())
