"""The gRPC port's bounds across all its connections: connections open at once (`--grpc-max-connections`, both front
ends: one past it is closed at once, and its place comes back when one closes; on the native front end a newcomer
from an address holding fewer than another takes a place from that other's quietest connection, so one address
cannot keep the others out, after the calls that connection is answering); on the native front end, unary calls
whose message has not arrived (`--grpc-max-incomplete-calls`: at the limit, the one that has waited longest gives way
to the new one, so calls that never send their message do not keep others out) and open streams
(`--grpc-max-open-streams`: one past it is refused). Both answer RESOURCE_EXHAUSTED at once, naming the flag. Without them, connections times the
per-connection limit of calls was open: 40 connections of 256 streams that never send a message held +220 MiB.
The server goes on serving meanwhile."""

from __future__ import annotations

import contextlib
import selectors
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.support import raw_grpc
from tests.support.grpc_port import (
    FRONTENDS,
    MODEL_INFER,
    MODEL_STREAM_INFER,
    PREFACE,
    SETTINGS,
    bodiless_calls,
    connect,
    native_only,
    serving,
    still_serving,
)
from tests.support.liveness import memory_kib
from tests.support.runtime_process import RuntimeProcess
from tests.support.sockets import LOADED, is_open, wait_closed, wait_port_settled

SERVER_LIVE = "/inference.GRPCInferenceService/ServerLive"
MAX_CONNECTIONS = 48
MAX_INCOMPLETE = 10
MAX_STREAMS = 3
RESOURCE_EXHAUSTED = 8


@pytest.fixture(scope="module", params=FRONTENDS)
def budgeted(request: pytest.FixtureRequest, repository: Path) -> Iterator[RuntimeProcess]:
    with serving(repository, request.param, [f"--grpc-max-connections={MAX_CONNECTIONS}",
                                             f"--grpc-max-incomplete-calls={MAX_INCOMPLETE}",
                                             f"--grpc-max-open-streams={MAX_STREAMS}"]) as proc:
        yield proc


def _opened(proc: RuntimeProcess) -> tuple[socket.socket, bool]:
    """A connection that sent the preface and SETTINGS, and whether the server kept it: a kept one gets the server's
    SETTINGS, one past the limit is closed without a byte."""
    sock = connect(proc)
    sock.sendall(PREFACE + SETTINGS)
    try:
        first = sock.recv(9)
    except ConnectionError:
        first = b""
    return sock, bool(first)


def _add_sub_request() -> bytes:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    request = pb.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        request.raw_input_contents.append(a.tobytes())
    return raw_grpc.frame(request.SerializeToString())


def _refused(answers: dict[int, raw_grpc.RawAnswer], flag: str) -> set[int]:
    """The streams of `answers`, each refused RESOURCE_EXHAUSTED naming `flag`."""
    for answer in answers.values():
        assert answer.status == RESOURCE_EXHAUSTED, answer
        assert flag in answer.message, answer.message
    return set(answers)


def test_connections_past_the_limit_are_closed_at_once(budgeted: RuntimeProcess) -> None:
    held: list[socket.socket] = []
    try:
        deadline = time.monotonic() + LOADED  # connections an earlier test closed free their places in time
        for _ in range(MAX_CONNECTIONS):
            held.append(_place(budgeted, deadline))
        start = time.monotonic()
        with connect(budgeted) as past:
            wait_closed(past, LOADED)
        assert time.monotonic() - start < LOADED
        held.pop().close()  # its place comes back once the server has seen the close
        held.append(_place(budgeted, time.monotonic() + LOADED))
    finally:
        for sock in held:
            sock.close()
    _serving_again(budgeted)


def test_a_port_one_address_fills_makes_room_for_another(budgeted: RuntimeProcess) -> None:
    """The native port full of one address's connections: another from it is closed, but one from a second address
    is kept and served, and the first address's quietest connection gives way; a third address then takes the next
    quietest; the first address's other connections stay, and one more from it is still closed."""
    native_only(budgeted)
    live = [raw_grpc.frame(pb.ServerLiveRequest().SerializeToString())]
    held: list[socket.socket] = []
    try:
        deadline = time.monotonic() + LOADED
        for _ in range(MAX_CONNECTIONS):
            held.append(_place(budgeted, deadline))
        for later in (held[1:2], held[2:]):  # quiet since: held[0] longest, then held[1], by margins the port sees
            time.sleep(0.05)
            for sock in later:
                _ping(sock)
        with connect(budgeted) as past:
            wait_closed(past, LOADED)
        with raw_grpc.RawConnection(budgeted.grpc_url, LOADED, source="127.0.0.2") as second, \
                raw_grpc.RawConnection(budgeted.grpc_url, LOADED, source="127.0.0.3") as third:
            assert second.call(SERVER_LIVE, live).status == 0
            wait_closed(held[0], LOADED)
            assert third.call(SERVER_LIVE, live).status == 0
            wait_closed(held[1], LOADED)
            assert all(is_open(sock) for sock in held[2:])
            with connect(budgeted) as past:
                wait_closed(past, LOADED)
            assert second.call(SERVER_LIVE, live).status == 0
            assert all(is_open(sock) for sock in held[2:])
    finally:
        for sock in held:
            sock.close()
    _serving_again(budgeted)


HELD_CONNECTIONS = 4
HELD_STREAMS = 2


@pytest.fixture(scope="module")
def held_limited(repository: Path, held_repository: Path, held_dir: Path) -> Iterator[RuntimeProcess]:
    """The native front end with a few connection and stream places, serving `py_held` (an execution the test
    releases)."""
    with RuntimeProcess([repository, held_repository], ["--grpc-frontend=native", "--strict-readiness=false",
                                                        f"--grpc-max-connections={HELD_CONNECTIONS}",
                                                        f"--grpc-max-open-streams={HELD_STREAMS}"],
                        env={"HELD_MODEL_DIR": str(held_dir)}) as proc:
        proc.wait_ready()
        proc.wait_model_ready("py_held")
        yield proc


def test_a_connection_answering_a_call_gives_way_after_the_answer(held_limited: RuntimeProcess,
                                                                   held_dir: Path) -> None:
    """The connection waiting longest on the server has read nothing for longest: the quietest. Told to give way
    while a call on it is being answered, it says so with a GOAWAY (NO_ERROR), answers that call, then closes. A
    call the client sent before it read the GOAWAY (here: after, its PING not acknowledged) is served, as grpc core
    serves it, for 5 s; one sent later than that is refused with REFUSED_STREAM, so a client that never acknowledges
    cannot keep the connection with new calls. Before, the connection was closed at once and the call lost; then a
    new call on it was answered UNAVAILABLE until it closed; then refused REFUSED_STREAM, which grpc core's client
    does not send again."""
    _fresh(held_limited, held_dir)
    deadline = time.monotonic() + LOADED
    with raw_grpc.RawConnection(held_limited.grpc_url, LOADED, source="127.0.0.1") as waiting:
        call = waiting.open_call(MODEL_INFER)
        waiting.start(call, [_held_request()])
        _wait_started(held_dir, deadline)
        with (_quieter_places(held_limited, deadline) as others,
              raw_grpc.RawConnection(held_limited.grpc_url, LOADED, source="127.0.0.2") as second):
            assert second.call(SERVER_LIVE, [_live()]).status == 0  # served: a place was given up for it
            assert waiting.goaway(LOADED) == (2**31 - 1, 0)  # graceful: the streams it took follow
            assert waiting.call(SERVER_LIVE, [_live()]).status == 0  # late, and served
            assert _refused_in_the_end(waiting, deadline) == raw_grpc.REFUSED_STREAM
            (held_dir / "release").write_text("")
            answer = waiting.answer(call)
            assert answer.status == 0, answer
            assert pb.ModelInferResponse.FromString(answer.data[5:]).raw_output_contents == [np.float32(7).tobytes()]
            _closed_alone(waiting, others, second)


def _refused_in_the_end(connection: raw_grpc.RawConnection, deadline: float) -> int:
    """Calls ServerLive on `connection` until a call is reset, by `deadline`; the reset's error code."""
    while time.monotonic() < deadline:
        try:
            assert connection.call(SERVER_LIVE, [_live()]).status == 0
        except raw_grpc.StreamResetError as reset:
            return reset.error_code
        time.sleep(0.25)
    raise AssertionError("every call was served")


def test_a_grpc_client_whose_connection_gave_way_calls_on_a_new_one(held_limited: RuntimeProcess,
                                                                     held_dir: Path) -> None:
    """A grpcio channel whose connection gives way while a call on it waits for its model: that call is answered,
    and the channel's next call is served on a new connection (the GOAWAY told it to open one; a call it sent before
    reading the GOAWAY is served on the old one). Before, that next call was answered UNAVAILABLE
    until the old connection closed."""
    _fresh(held_limited, held_dir)
    deadline = time.monotonic() + LOADED
    with grpc.insecure_channel(held_limited.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        held = stub.ModelInfer.future(_held_infer(), timeout=LOADED)
        _wait_started(held_dir, deadline)
        with (_quieter_places(held_limited, deadline) as others,
              raw_grpc.RawConnection(held_limited.grpc_url, LOADED, source="127.0.0.2") as second):
            assert second.call(SERVER_LIVE, [_live()]).status == 0  # served: the channel's connection gave way
            others.pop().close()  # a place for the channel's new connection, once the server has closed this one
            wait_port_settled(int(held_limited.grpc_url.rsplit(":", 1)[1]), LOADED)
            assert stub.ServerLive(pb.ServerLiveRequest(), timeout=LOADED).live
            (held_dir / "release").write_text("")
            assert held.result().raw_output_contents == [np.float32(7).tobytes()]


def test_a_call_past_its_deadline_is_answered_deadline_exceeded(held_limited: RuntimeProcess, held_dir: Path) -> None:
    """The server keeps the client's deadline (`grpc-timeout`), as grpc core's does: a call waiting on its model
    past it is answered DEADLINE_EXCEEDED, and the connection goes on serving. (tonic's server, before each
    connection was driven by the core, answered CANCELLED.)"""
    _fresh(held_limited, held_dir)
    with raw_grpc.RawConnection(held_limited.grpc_url, LOADED) as connection:
        try:
            started = time.monotonic()
            answer = connection.call(MODEL_INFER, [_held_request()], headers=[("grpc-timeout", "300m")])
            assert answer.status == grpc.StatusCode.DEADLINE_EXCEEDED.value[0], answer
            assert answer.message == "Deadline Exceeded"
            assert time.monotonic() - started >= 0.3
        finally:
            (held_dir / "release").write_text("")
        # served once the timed-out execution has ended (one instance), so the next test's holds again
        assert connection.call(MODEL_INFER, [_held_request()]).status == 0


def test_a_connection_answering_a_stream_gives_way_after_its_answers(held_limited: RuntimeProcess,
                                                                     held_dir: Path) -> None:
    """Told to give way while a request a ModelStreamInfer read is being answered, the connection reads no further
    request of the stream, sends that request's answer, then ends the stream UNAVAILABLE saying why, then closes; a
    stream on it with nothing in flight ends so at once. Before, the connection was closed at once and the answer
    lost."""
    _fresh(held_limited, held_dir)
    deadline = time.monotonic() + LOADED
    with raw_grpc.RawConnection(held_limited.grpc_url, LOADED, source="127.0.0.1") as waiting:
        stream = waiting.open_call(MODEL_STREAM_INFER)
        waiting.more(stream, [_held_request("first")])
        quiet = waiting.open_call(MODEL_STREAM_INFER)
        assert "grpc-status" not in waiting.opened(stream) and "grpc-status" not in waiting.opened(quiet)
        _wait_started(held_dir, deadline)
        with (_quieter_places(held_limited, deadline) as others,
              raw_grpc.RawConnection(held_limited.grpc_url, LOADED, source="127.0.0.2") as second):
            assert second.call(SERVER_LIVE, [_live()]).status == 0  # served: a place was given up for it
            ended = waiting.ended(1, LOADED)
            assert list(ended) == [quiet], ended
            assert ended[quiet].status == grpc.StatusCode.UNAVAILABLE.value[0], ended
            assert "gave way" in ended[quiet].message
            waiting.more(stream, [_held_request("late")])  # not read: the connection takes no new request
            (held_dir / "release").write_text("")
            answer = waiting.answer(stream)
            assert answer.status == grpc.StatusCode.UNAVAILABLE.value[0], answer
            assert "gave way" in answer.message
            responses = [pb.ModelStreamInferResponse.FromString(m) for m in raw_grpc.messages(answer.data)]
            assert [r.infer_response.id for r in responses] == ["first"], responses
            assert not responses[0].error_message
            assert responses[0].infer_response.raw_output_contents == [np.float32(7).tobytes()]
            _closed_alone(waiting, others, second)


def test_a_stream_answering_a_request_gives_way_after_its_answer(held_limited: RuntimeProcess,
                                                                  held_dir: Path) -> None:
    """At the open-streams limit the quietest stream of the address holding more gives way to one from another
    address. One with a request being answered reads no further request, sends that request's answer, then ends
    RESOURCE_EXHAUSTED saying why; the address's other stream stays open. Before, it ended at once and the answer
    was lost."""
    _fresh(held_limited, held_dir)
    deadline = time.monotonic() + LOADED
    with raw_grpc.RawConnection(held_limited.grpc_url, LOADED, source="127.0.0.1") as first:
        waiting = first.open_call(MODEL_STREAM_INFER)
        first.more(waiting, [_held_request("first")])
        _wait_started(held_dir, deadline)
        time.sleep(0.05)  # the other stream is heard from later by a margin: the waiting one is the quietest
        other = first.open_call(MODEL_STREAM_INFER)
        assert "grpc-status" not in first.opened(waiting) and "grpc-status" not in first.opened(other)
        with raw_grpc.RawConnection(held_limited.grpc_url, LOADED, source="127.0.0.2") as second:
            newcomer = second.open_call(MODEL_STREAM_INFER)
            served = second.send(newcomer, [_add_sub_request()])  # admitted: the waiting stream gave way
            assert served.status == 0 and len(raw_grpc.messages(served.data)) == 1, served
            first.more(waiting, [_held_request("late")])  # not read: the stream takes no new request
            (held_dir / "release").write_text("")
            answer = first.answer(waiting)
            assert answer.status == RESOURCE_EXHAUSTED, answer
            assert "gave way to a stream from another address" in answer.message
            responses = [pb.ModelStreamInferResponse.FromString(m) for m in raw_grpc.messages(answer.data)]
            assert [r.infer_response.id for r in responses] == ["first"], responses
            assert responses[0].infer_response.raw_output_contents == [np.float32(7).tobytes()]
            kept = first.send(other, [_held_request("other")])
            assert kept.status == 0, kept
            assert [pb.ModelStreamInferResponse.FromString(m).infer_response.id
                    for m in raw_grpc.messages(kept.data)] == ["other"]


def _live() -> bytes:
    return raw_grpc.frame(pb.ServerLiveRequest().SerializeToString())


def _held_infer(request_id: str = "") -> pb.ModelInferRequest:
    """A `py_held` request (X = 7)."""
    return pb.ModelInferRequest(model_name="py_held", id=request_id, raw_input_contents=[np.float32(7).tobytes()],
                                inputs=[pb.ModelInferRequest.InferInputTensor(name="X", datatype="FP32", shape=[1])])


def _held_request(request_id: str = "") -> bytes:
    """A framed `py_held` request (X = 7)."""
    return raw_grpc.frame(_held_infer(request_id).SerializeToString())


def _fresh(proc: RuntimeProcess, held_dir: Path) -> None:
    """`py_held` waits again (an earlier test released it), and the connections earlier tests closed hold no place
    (the server has closed its ends)."""
    for name in ("started", "release"):
        (held_dir / name).unlink(missing_ok=True)
    wait_port_settled(int(proc.grpc_url.rsplit(":", 1)[1]), LOADED)


def _wait_started(held_dir: Path, deadline: float) -> None:
    while not (held_dir / "started").exists():
        assert time.monotonic() < deadline, "py_held never started"
        time.sleep(0.01)


@contextlib.contextmanager
def _quieter_places(proc: RuntimeProcess, deadline: float) -> Iterator[list[socket.socket]]:
    """The port's other places, taken and then heard from (so the connection already waiting is the quietest by a
    margin); closed on leaving."""
    others = [_place(proc, deadline) for _ in range(HELD_CONNECTIONS - 1)]
    try:
        time.sleep(0.05)
        for sock in others:
            _ping(sock)
        yield others
    finally:
        for sock in others:
            sock.close()


def _closed_alone(waiting: raw_grpc.RawConnection, others: list[socket.socket],
                  second: raw_grpc.RawConnection) -> None:
    """`waiting` is closed (once its answers had the flush grace, 5 s, to leave); the others stay, `second` is
    served."""
    wait_closed(waiting.sock, LOADED)
    assert all(is_open(sock) for sock in others)
    assert second.call(SERVER_LIVE, [_live()]).status == 0


def _ping(sock: socket.socket) -> None:
    """A PING on `sock`, once the server has acknowledged it (so it has read it)."""
    payload = b"fairness"
    sock.sendall(b"\x00\x00\x08\x06\x00\x00\x00\x00\x00" + payload)
    acknowledged = b"\x00\x00\x08\x06\x01\x00\x00\x00\x00" + payload
    received = b""
    while acknowledged not in received:
        chunk = sock.recv(65536)  # the socket's timeout (LOADED) bounds the wait
        assert chunk, "the server closed the connection"
        received += chunk


def _place(proc: RuntimeProcess, deadline: float) -> socket.socket:
    """A connection the server keeps, opened before `deadline`."""
    while True:
        sock, kept = _opened(proc)
        if kept:
            return sock
        sock.close()
        assert time.monotonic() < deadline, "no place for a connection"


def _serving_again(proc: RuntimeProcess) -> None:
    """Serves once the places and permits of the connections a test closed have come back (the server sees the
    closes in its own time)."""
    deadline = time.monotonic() + LOADED
    while True:
        try:
            still_serving(proc)
            return
        except InferenceServerException as error:
            if time.monotonic() > deadline or error.status() not in ("StatusCode.UNAVAILABLE",
                                                                       "StatusCode.RESOURCE_EXHAUSTED"):
                raise


def test_at_the_limit_the_longest_waiting_call_gives_way(budgeted: RuntimeProcess) -> None:
    native_only(budgeted)
    live = [raw_grpc.frame(pb.ServerLiveRequest().SerializeToString())]
    per_connection = 8  # under the per-connection limit (256): only the budget across connections acts
    with raw_grpc.RawConnection(budgeted.grpc_url, LOADED) as first, \
            raw_grpc.RawConnection(budgeted.grpc_url, LOADED) as second:
        # In one write: the server reads the 8 together, and hyper runs each call in its own task, which tokio
        # starts last first; the order of the calls is still the order they came in (crate::budget's Arrival).
        first_calls = first.open_calls(MODEL_INFER, per_connection)
        assert first.call(SERVER_LIVE, live).status == 0  # answered after the server has taken the 8 before it
        second_calls = [second.open_call(MODEL_INFER) for _ in range(per_connection)]
        # 16 calls waiting, 10 places: the first connection's 6 longest waiting gave way
        gave_way = first.ended(2 * per_connection - MAX_INCOMPLETE, LOADED)
        assert sorted(_refused(gave_way, "--grpc-max-incomplete-calls")) == first_calls[:6], gave_way
        assert all("gave way" in answer.message for answer in gave_way.values())

        # with the budget full of calls that send nothing, others' calls are still answered; the next longest
        # waiting gives way to each
        still_serving(budgeted)
        assert sorted(first.ended(1, LOADED)) == [first_calls[6]]
        assert second.ended(1, 0.5) == {}

        # a call that waited, kept its place, and sends its message is answered
        answer = second.send(second_calls[-1], [_add_sub_request()])
        assert answer.status == 0, answer
        output = pb.ModelInferResponse.FromString(answer.data[5:]).raw_output_contents[0]
        np.testing.assert_array_equal(np.frombuffer(output, np.float32), 2 * np.arange(16, dtype=np.float32))
    _serving_again(budgeted)


def _stream(proc: RuntimeProcess) -> list[pb.ModelStreamInferResponse]:
    with grpc.insecure_channel(proc.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = pb.ModelInferRequest.FromString(_add_sub_request()[5:])
        return list(stub.ModelStreamInfer(iter([request]), timeout=LOADED))


def test_open_streams_are_bounded_across_connections(budgeted: RuntimeProcess) -> None:
    native_only(budgeted)
    with raw_grpc.RawConnection(budgeted.grpc_url, LOADED) as first, \
            raw_grpc.RawConnection(budgeted.grpc_url, LOADED) as second:
        for connection in (first, second):
            for _ in range(2):
                connection.open_call(MODEL_STREAM_INFER)
        answers = {**first.ended(1, 0.5), **second.ended(1, 0.5)}
        deadline = time.monotonic() + LOADED
        while not answers and time.monotonic() < deadline:
            answers = {**first.ended(1, 0.2), **second.ended(1, 0.2)}
        assert len(_refused(answers, "--grpc-max-open-streams")) == 4 - MAX_STREAMS

        with pytest.raises(grpc.RpcError) as caught:  # a whole stream too, while the three are open
            _stream(budgeted)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, caught.value
    deadline = time.monotonic() + LOADED  # the closed connections' streams end in the server's own time
    while True:
        try:
            responses = _stream(budgeted)
            break
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > deadline:
                raise
    assert [r.error_message for r in responses] == [""]
    output = responses[0].infer_response.raw_output_contents[0]
    np.testing.assert_array_equal(np.frombuffer(output, np.float32), 2 * np.arange(16, dtype=np.float32))


def test_streams_one_address_fills_give_way_to_another_addresss(budgeted: RuntimeProcess) -> None:
    """All the stream places held by one address's bodiless streams, opened in one write: a stream from another
    address is served, and the first of them (equally quiet, the one that came first) ends RESOURCE_EXHAUSTED,
    saying it gave way; the others stay open."""
    native_only(budgeted)
    with raw_grpc.RawConnection(budgeted.grpc_url, LOADED) as hog:
        held = _fill_stream_places(hog)
        with raw_grpc.RawConnection(budgeted.grpc_url, LOADED, source="127.0.0.2") as other:
            answer = other.call(MODEL_STREAM_INFER, [_add_sub_request()])
        assert answer.status == 0, answer
        response = pb.ModelStreamInferResponse.FromString(answer.data[5:])
        assert response.error_message == ""
        output = np.frombuffer(response.infer_response.raw_output_contents[0], np.float32)
        np.testing.assert_array_equal(output, 2 * np.arange(16, dtype=np.float32))
        gave_way = hog.ended(1, LOADED)
        # hyper runs each stream in its own task, and tokio starts the last spawned first: the order they came in
        # is still the order they gave way in (crate::budget's Arrival)
        assert sorted(_refused(gave_way, "--grpc-max-open-streams")) == held[:1], gave_way
        assert all("the quietest of the address holding the most, gave way" in answer.message
                   for answer in gave_way.values())
        assert hog.ended(1, 1.0) == {}  # the others stay
    _serving_again(budgeted)


def _fill_stream_places(connection: raw_grpc.RawConnection) -> list[int]:
    """Bodiless streams on `connection` holding every stream place, their HEADERS in one write (the server reads
    them together), in the order sent; opened again until none is refused (one is while streams an earlier test
    closed still hold their places)."""
    deadline = time.monotonic() + LOADED
    while True:
        opened = connection.open_calls(MODEL_STREAM_INFER, MAX_STREAMS)
        refused = _refused(connection.ended(MAX_STREAMS, 0.5), "--grpc-max-open-streams")
        if not refused & set(opened):
            return opened
        assert time.monotonic() < deadline, "no places for streams"
        for stream in set(opened) - refused:
            connection.cancel(stream)


def test_bodiless_streams_across_many_connections_hold_what_the_budget_allows(budgeted: RuntimeProcess) -> None:
    # 40 connections of 64 streams that never send a message: +54 MiB before the budget (~21 KiB a stream)
    native_only(budgeted)
    connections, per_connection = 40, 64
    before = memory_kib(budgeted.pid, "VmRSS")
    socks = [connect(budgeted) for _ in range(connections)]
    try:
        for sock in socks:
            sock.sendall(bodiless_calls(per_connection, MODEL_STREAM_INFER))
        refused = _ended_calls(socks, connections * per_connection - MAX_STREAMS)
        grown = memory_kib(budgeted.pid, "VmRSS") - before
    finally:
        for sock in socks:
            sock.close()
    print(f"{connections} connections of {per_connection} bodiless streams: +{grown} KiB")
    assert refused == connections * per_connection - MAX_STREAMS
    assert grown < 16 * 1024, f"+{grown} KiB"
    _serving_again(budgeted)


def _ended_calls(socks: list[socket.socket], calls: int) -> int:
    """Reads the connections until `calls` calls have ended (HEADERS frames with END_STREAM; the server answers a
    refusal in one), or LOADED seconds pass; returns how many did."""
    wires = {sock: bytearray() for sock in socks}
    ended = 0
    deadline = time.monotonic() + LOADED
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            selector.register(sock, selectors.EVENT_READ)
        while ended < calls and (left := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(left):
                readable = key.fileobj
                assert isinstance(readable, socket.socket)
                chunk = readable.recv(1 << 20)
                if not chunk:
                    raise ConnectionError("the server closed a connection")
                wire = wires[readable]
                wire += chunk
                while len(wire) >= 9 and len(wire) >= 9 + (length := int.from_bytes(wire[:3], "big")):
                    ended += wire[3] == 0x1 and wire[4] & 0x1 == 0x1
                    del wire[:9 + length]
    return ended
