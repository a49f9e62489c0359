"""Compressed gRPC requests (`grpc-encoding: gzip | deflate`, as tritonclient's `compression_algorithm` and
perf_analyzer's `--grpc-compression-algorithm` send them) against the native front end, next to the grpcio front
end over the same repository: answered as uncompressed ones are; inflated only up to the message size limit, so a
small message that inflates past it is refused without the memory; bytes that do not inflate refused with a clear
status; and the server goes on serving."""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from queue import Queue

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException

from tests.support import raw_grpc
from tests.support.liveness import LivenessProbe, memory_kib
from tests.support.runtime_process import RuntimeProcess

MiB = 1024 * 1024
LIMIT = MiB
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
MODEL_STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
ALGORITHMS = ["gzip", "deflate"]


@pytest.fixture(scope="module")
def servers(repository: Path) -> Iterator[dict[str, RuntimeProcess]]:
    started = {frontend: RuntimeProcess([repository], [f"--grpc-frontend={frontend}", "--strict-readiness=false",
                                                       f"--grpc-max-message-bytes={LIMIT}"]).start()
               for frontend in ("native", "grpcio")}
    try:
        for proc in started.values():
            proc.wait_ready()
            proc.wait_model_ready("add_sub")
        yield started
    finally:
        for proc in started.values():
            proc.stop()


def _inputs(a: np.ndarray, b: np.ndarray) -> list[grpcclient.InferInput]:
    inputs = [grpcclient.InferInput(name, list(a.shape), "FP32") for name in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def _request(raw: bytes, request_id: str = "") -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="add_sub", id=request_id)
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        request.raw_input_contents.append(raw)
    return request


def _still_serving(proc: RuntimeProcess) -> None:
    a = np.ones((1, 16), np.float32)
    with proc.grpc_client() as client:
        np.testing.assert_array_equal(client.infer("add_sub", _inputs(a, a)).as_numpy("OUTPUT0"), a + a)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_compressed_infer_answered_as_uncompressed(servers: dict[str, RuntimeProcess], algorithm: str) -> None:
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.full((2, 16), 0.5, np.float32)
    for proc in servers.values():
        with proc.grpc_client() as client:
            result = client.infer("add_sub", _inputs(a, b), request_id="c-1", compression_algorithm=algorithm)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        assert result.get_response().id == "c-1"


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_compressed_stream_answers_every_request(servers: dict[str, RuntimeProcess], algorithm: str) -> None:
    for proc in servers.values():
        answers: Queue[tuple[object, object]] = Queue()
        with proc.grpc_client() as client:
            client.start_stream(lambda result, error, answers=answers: answers.put((result, error)),
                                compression_algorithm=algorithm)
            for i in range(3):
                x = np.full((1, 16), i, np.float32)
                client.async_stream_infer("add_sub", _inputs(x, x), request_id=f"s-{i}")
            got = {}
            for _ in range(3):
                result, error = answers.get(timeout=60)
                assert error is None, error
                assert isinstance(result, grpcclient.InferResult)
                got[result.get_response().id] = result.as_numpy("OUTPUT0")
            client.stop_stream()
        for i in range(3):
            np.testing.assert_array_equal(got[f"s-{i}"], np.full((1, 16), 2 * i, np.float32))


def _refusal(proc: RuntimeProcess, method: str, message: bytes, compression: grpc.Compression) -> tuple[grpc.StatusCode, str]:
    with grpc.insecure_channel(proc.grpc_url, compression=compression) as channel:
        try:
            if method == MODEL_INFER:
                channel.unary_unary(method)(message, timeout=120)
            else:
                list(channel.stream_stream(method)(iter([message]), timeout=120))
        except grpc.RpcError as exc:
            return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


@pytest.mark.parametrize("method", [MODEL_INFER, MODEL_STREAM_INFER])
@pytest.mark.parametrize("compression", [grpc.Compression.Gzip, grpc.Compression.Deflate], ids=ALGORITHMS)
def test_message_inflating_past_the_limit_refused_without_the_memory(
    servers: dict[str, RuntimeProcess], method: str, compression: grpc.Compression,
) -> None:
    """128 MiB of zeros travels as about 128 KiB (under the 1 MiB limit), and would inflate to 128 MiB: refused
    once the inflated bytes pass the limit, as grpcio refuses it, with the server's peak memory nowhere near it."""
    bomb = _request(bytes(64 * 1024 * 1024)).SerializeToString()  # two inputs
    assert len(zlib.compress(bomb)) < LIMIT
    native = servers["native"]
    peak_before = memory_kib(native.pid)
    answers = {name: _refusal(proc, method, bomb, compression) for name, proc in servers.items()}
    assert answers["native"] == answers["grpcio"] == (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                                       "Decompressed message larger than max")
    assert memory_kib(native.pid) - peak_before < 64 * 1024, "the peak resident set grew by 64 MiB or more"
    _still_serving(native)


GZIP_OK = gzip.compress(_request(bytes(64)).SerializeToString())
UNINFLATABLE = [
    pytest.param("gzip", raw_grpc.frame(b"\x00not gzip" * 8, compressed=True), id="gzip-garbage"),
    pytest.param("deflate", raw_grpc.frame(b"\x00not zlib" * 8, compressed=True), id="deflate-garbage"),
    pytest.param("gzip", raw_grpc.frame(GZIP_OK[: len(GZIP_OK) // 2], compressed=True), id="gzip-truncated"),
    pytest.param(None, raw_grpc.frame(GZIP_OK, compressed=True), id="flag-without-encoding"),
    pytest.param("identity", raw_grpc.frame(GZIP_OK, compressed=True), id="flag-with-identity"),
]


@pytest.mark.parametrize("method", [MODEL_INFER, MODEL_STREAM_INFER])
@pytest.mark.parametrize(("encoding", "message"), UNINFLATABLE)
def test_frames_that_do_not_inflate_refused(servers: dict[str, RuntimeProcess], method: str, encoding: str | None,
                                            message: bytes) -> None:
    """Bytes a gRPC library would not send, over a real HTTP/2 connection: INTERNAL, as grpcio answers them, with
    a message that says what failed (grpcio's and tonic's words differ); serving goes on."""
    headers = [("grpc-encoding", encoding)] if encoding else []
    for name, proc in servers.items():
        answer = raw_grpc.call(proc.grpc_url, method, [message], headers)
        assert answer.status == grpc.StatusCode.INTERNAL.value[0], (name, answer)
        assert "compress" in answer.message.lower(), (name, answer)
    _still_serving(servers["native"])


def test_unknown_encoding_is_unimplemented(servers: dict[str, RuntimeProcess]) -> None:
    """An encoding the server does not speak: UNIMPLEMENTED, naming it, with the ones it does, as the gRPC
    compression spec asks (grpcio answers INTERNAL "Error parsing 'grpc-encoding' metadata")."""
    native = servers["native"]
    answer = raw_grpc.call(native.grpc_url, MODEL_INFER, [raw_grpc.frame(b"\x01\x02", compressed=True)],
                           [("grpc-encoding", "br")])
    assert answer.status == grpc.StatusCode.UNIMPLEMENTED.value[0], answer
    assert "`br`" in answer.message
    accepted = {name.strip() for name in answer.fields.get("grpc-accept-encoding", "").split(",")}
    assert {"gzip", "deflate"} <= accepted, answer.fields
    _still_serving(native)


def test_compressed_requests_from_many_clients_at_once(servers: dict[str, RuntimeProcess]) -> None:
    """Compressed and plain calls in flight together on the core: every answer right."""
    native = servers["native"]
    errors: list[BaseException] = []

    def client(index: int) -> None:
        a = np.full((1, 16), index, np.float32)
        try:
            with native.grpc_client() as c:
                for round_ in range(10):
                    algorithm = (None, "gzip", "deflate")[(index + round_) % 3]
                    out = c.infer("add_sub", _inputs(a, a), compression_algorithm=algorithm).as_numpy("OUTPUT0")
                    np.testing.assert_array_equal(out, a + a)
        except (AssertionError, InferenceServerException) as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors[:3]


def _gzip_bomb(inflated_mib: int) -> bytes:
    """A ModelInfer message for add_sub whose INPUT0 holds `inflated_mib` MiB of zeros, gzipped as it is written
    (about 1 KiB per MiB), never whole in memory."""
    head = pb.ModelInferRequest(model_name="add_sub")
    head.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    length, prefix = inflated_mib * MiB, bytearray()
    while True:  # raw_input_contents (field 7, length-delimited): its tag, then its length as a varint
        prefix.append((length & 0x7F) | (0x80 if length > 0x7F else 0))
        length >>= 7
        if not length:
            break
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(MiB)
    parts = [packer.compress(head.SerializeToString() + b"\x3a" + bytes(prefix))]
    parts += [packer.compress(zeros) for _ in range(inflated_mib)]
    return b"".join([*parts, packer.flush()])


def test_many_bombs_at_once_hold_one_limit_of_memory(repository: Path) -> None:
    """Eight calls at once, each a 64 KiB message that inflates to 64 MiB against a 32 MiB limit: each refused;
    the messages inflate one at a time, so the peak grows by about one limit, not eight; gRPC and HTTP liveness
    stay up meanwhile (each inflation yields to the core's other calls every MiB)."""
    limit_mib = 32
    bomb = raw_grpc.frame(_gzip_bomb(2 * limit_mib), compressed=True)
    proc = RuntimeProcess([repository], ["--strict-readiness=false", f"--grpc-max-message-bytes={limit_mib * MiB}",
                                         "--model-control-mode=explicit", "--load-model=add_sub"]).start()
    try:
        proc.wait_model_ready("add_sub")
        _still_serving(proc)
        before = memory_kib(proc.pid)
        answers: Queue[raw_grpc.RawAnswer | BaseException] = Queue()

        def send() -> None:
            try:
                answers.put(raw_grpc.call(proc.grpc_url, MODEL_INFER, [bomb], [("grpc-encoding", "gzip")]))
            except (OSError, ConnectionError) as exc:
                answers.put(exc)

        with LivenessProbe(proc.http_url, proc.grpc_url) as probe:
            senders = [threading.Thread(target=send) for _ in range(8)]
            for sender in senders:
                sender.start()
            got = [answers.get(timeout=120) for _ in senders]
        growth_mib = (memory_kib(proc.pid) - before) // 1024
        print(f"\n[8 gzip bombs of {len(bomb) // 1024} KiB -> {2 * limit_mib} MiB, limit {limit_mib} MiB] "
              f"{probe.report()}; VmHWM +{growth_mib} MiB")
        for answer in got:
            assert isinstance(answer, raw_grpc.RawAnswer), answer
            assert (answer.status, answer.message) == (grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
                                                       "Decompressed message larger than max")
        assert growth_mib < 3 * limit_mib, f"the peak grew by {growth_mib} MiB"
        assert not probe.failures, probe.failures
        assert probe.worst_s < 1.0, probe.report()  # loose, for a busy machine; the figure is printed
        _still_serving(proc)
    finally:
        proc.stop()
