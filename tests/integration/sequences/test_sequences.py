"""Sequence batching on a real runtime process, called with the real tritonclient (gRPC, stream, aio, HTTP).

The examples' calls and checks (two or three sequences, answers per sequence), uint64 and string correlation
IDs, Triton's errors for a missing correlation ID, a missing START, a batch of more than one, and a sequence
released for being idle; implicit state; oldest-first batching across sequences; an ensemble whose step is
stateful. Every error test checks that the server still answers a good request afterwards.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.integration.sequences import calls
from tests.support.runtime_process import RuntimeProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RuntimeProcess]:
    root = tmp_path_factory.mktemp("seq") / "models"
    shutil.copytree(calls.MODELS, root)
    with RuntimeProcess([root]) as proc:
        proc.wait_ready(timeout=120)
        yield proc


def still_serves(server: RuntimeProcess) -> None:
    with server.grpc_client() as client:
        assert calls.sync_send(client, grpcclient, "simple_sequence", [4, 5], 999_999) == [5, 5]


def failure(call: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()
    return caught.value


# ---- the examples ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dyna", [False, True], ids=["simple", "dyna"])
def test_grpc_sequence_sync_example(server: RuntimeProcess, dyna: bool) -> None:
    with server.grpc_client() as client:
        calls.sync_example(client, grpcclient, dyna)


@pytest.mark.parametrize("dyna", [False, True], ids=["simple", "dyna"])
def test_http_sequence_sync_example(server: RuntimeProcess, dyna: bool) -> None:
    with server.http_client() as client:
        calls.sync_example(client, httpclient, dyna, offset=10)


@pytest.mark.parametrize("dyna", [False, True], ids=["simple", "dyna"])
def test_grpc_sequence_stream_example(server: RuntimeProcess, dyna: bool) -> None:
    calls.grpc_stream(server.grpc_url, dyna, offset=20)


@pytest.mark.parametrize("dyna", [False, True], ids=["simple", "dyna"])
def test_grpc_aio_sequence_stream_example(server: RuntimeProcess, dyna: bool) -> None:
    calls.run_aio(server.grpc_url, dyna)


def test_interleaved_sequences_keep_their_own_answers(server: RuntimeProcess) -> None:
    """Two sequences on the accumulating model, their requests alternating, from two threads."""
    values = list(range(1, 30))

    def run(sequence_id: int, sign: int) -> list[int]:
        with server.grpc_client() as client:
            return calls.sync_send(client, grpcclient, "seq_state", [sign * v for v in values], sequence_id)

    with ThreadPoolExecutor(2) as pool:
        a, b = pool.submit(run, 31, 1), pool.submit(run, 32, -1)
        sums = list(np.cumsum(values))
        assert a.result(timeout=120) == sums
        assert b.result(timeout=120) == [-s for s in sums]


# ---- correlation IDs ------------------------------------------------------------------------------------------
def corrid_seen(client: Any, module: Any, sequence_id: int | str) -> int:
    """seq_idle echoes the CORRID control input it was given (START and END in one request)."""
    tensor = module.InferInput("INPUT", [1], "INT32")
    tensor.set_data_from_numpy(np.zeros(1, np.int32))
    result = client.infer("seq_idle", [tensor], sequence_id=sequence_id, sequence_start=True, sequence_end=True)
    return int(result.as_numpy("CORRID_OUT")[0])


def test_uint64_correlation_id_reaches_the_model(server: RuntimeProcess) -> None:
    top = 2**64 - 1
    with server.http_client() as client:  # JSON carries the full unsigned range
        assert corrid_seen(client, httpclient, top) == top
    with server.grpc_client() as client:  # tritonclient sends int64_param
        assert corrid_seen(client, grpcclient, 2**63 - 1) == 2**63 - 1
        assert corrid_seen(client, grpcclient, "12345") == 12345  # a numeric string on a UINT64 CORRID
        error = failure(lambda: corrid_seen(client, grpcclient, "not-a-number"))
        assert error.status() == "StatusCode.INVALID_ARGUMENT"
        assert "correlation ID 'not-a-number' is a string" in error.message()
    still_serves(server)


def test_string_correlation_id_reaches_the_model(server: RuntimeProcess) -> None:
    with server.grpc_client() as client:
        values = [5, 6, 7]
        assert calls.sync_send(client, grpcclient, "simple_string_dyna_sequence", values, "77") == [5, 11, 18 + 77]
    with server.http_client() as client:
        assert calls.sync_send(client, httpclient, "simple_string_dyna_sequence", values, "78") == [5, 11, 18 + 78]


def test_same_number_as_string_and_integer_are_two_sequences(server: RuntimeProcess) -> None:
    with server.grpc_client() as client:
        client.infer("seq_state", [calls.value_input(grpcclient, 3)], sequence_id=41, sequence_start=True)
        client.infer("seq_state", [calls.value_input(grpcclient, 100)], sequence_id="41", sequence_start=True)
        result = client.infer("seq_state", [calls.value_input(grpcclient, 1)], sequence_id=41, sequence_end=True)
        assert int(result.as_numpy("OUTPUT")[0][0]) == 4
        result = client.infer("seq_state", [calls.value_input(grpcclient, 1)], sequence_id="41", sequence_end=True)
        assert int(result.as_numpy("OUTPUT")[0][0]) == 101


# ---- errors ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_request_without_correlation_id_is_refused(server: RuntimeProcess, protocol: str) -> None:
    module: Any = grpcclient if protocol == "grpc" else httpclient
    with (server.grpc_client() if protocol == "grpc" else server.http_client()) as client:
        error = failure(lambda: client.infer("simple_sequence", [calls.value_input(module, 1)]))
    assert error.message().endswith(
        "inference request to model 'simple_sequence' must specify a non-zero or non-empty correlation ID"
    )
    assert error.status() == ("StatusCode.INVALID_ARGUMENT" if protocol == "grpc" else "400")
    still_serves(server)


@pytest.mark.parametrize("sequence_id", [4242, "never-started"])
def test_request_without_start_is_refused(server: RuntimeProcess, sequence_id: int | str) -> None:
    with server.grpc_client() as client:
        error = failure(lambda: client.infer("simple_sequence", [calls.value_input(grpcclient, 1)], sequence_id=sequence_id))
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert error.message().endswith(
        f"inference request for sequence {sequence_id} to model 'simple_sequence' must specify the START flag on "
        "the first request of the sequence"
    )
    still_serves(server)


def test_request_after_end_needs_a_new_start(server: RuntimeProcess) -> None:
    with server.grpc_client() as client:
        assert calls.sync_send(client, grpcclient, "seq_state", [1, 2], 51) == [1, 3]
        error = failure(lambda: client.infer("seq_state", [calls.value_input(grpcclient, 1)], sequence_id=51))
        assert "must specify the START flag" in error.message()
    still_serves(server)


def test_batch_of_two_is_refused(server: RuntimeProcess) -> None:
    with server.grpc_client() as client:
        tensor = grpcclient.InferInput("INPUT", [2, 1], "INT32")
        tensor.set_data_from_numpy(np.ones((2, 1), np.int32))
        error = failure(lambda: client.infer("simple_sequence", [tensor], sequence_id=61, sequence_start=True))
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert "must specify batch-size 1 due to requirements of sequence batcher" in error.message()
    still_serves(server)


def test_bad_sequence_parameters_are_refused(server: RuntimeProcess) -> None:
    with server.http_client() as client:
        for bad in (2**64, -1):
            error = failure(lambda bad=bad: client.infer("simple_sequence", [calls.value_input(httpclient, 1)], sequence_id=bad))
            assert error.status() == "400" and "sequence_id" in error.message()
    still_serves(server)


def test_idle_sequence_is_released_and_its_next_request_refused(server: RuntimeProcess) -> None:
    """seq_idle has one slot and a 0.5 s idle limit: sequence B waits in the backlog until A is released for
    being idle (a condition, not a sleep); A's next request is then refused with Triton's START error."""
    def seq_input() -> grpcclient.InferInput:
        tensor = grpcclient.InferInput("INPUT", [1], "INT32")
        tensor.set_data_from_numpy(np.zeros(1, np.int32))
        return tensor

    with server.grpc_client() as client:
        client.infer("seq_idle", [seq_input()], sequence_id=71, sequence_start=True)
        done = threading.Event()

        def start_b() -> None:
            with server.grpc_client() as other:
                other.infer("seq_idle", [seq_input()], sequence_id=72, sequence_start=True, client_timeout=120)
            done.set()

        thread = threading.Thread(target=start_b)
        thread.start()
        assert done.wait(120), "sequence 72 never got the slot: idle sequence 71 was not released"
        thread.join()
        error = failure(lambda: client.infer("seq_idle", [seq_input()], sequence_id=71, sequence_end=True))
        assert error.status() == "StatusCode.INVALID_ARGUMENT"
        assert "inference request for sequence 71 to model 'seq_idle' must specify the START flag" in error.message()
        assert "idle for more than 500000 microseconds" in error.message()
        client.infer("seq_idle", [seq_input()], sequence_id=72, sequence_end=True)  # B still holds its slot
    still_serves(server)


# ---- state, strategies, ensembles -------------------------------------------------------------------------------
def test_implicit_state_accumulates_per_sequence_and_resets_on_start(server: RuntimeProcess) -> None:
    with server.grpc_client() as client:
        def send(value: int, sequence_id: int, start: bool = False, end: bool = False) -> int:
            result = client.infer(
                "seq_state", [calls.value_input(grpcclient, value)],
                sequence_id=sequence_id, sequence_start=start, sequence_end=end,
            )
            return int(result.as_numpy("OUTPUT")[0][0])

        assert send(5, 81, start=True) == 5
        assert send(100, 82, start=True) == 100
        assert send(5, 81) == 10
        assert send(1, 82) == 101
        assert send(1, 81, start=True) == 1  # a START on a live ID starts over
        assert send(2, 81, end=True) == 3
        assert send(2, 82, end=True) == 103
        outputs = client.get_model_metadata("seq_state").outputs
        assert [o.name for o in outputs] == ["OUTPUT"]  # the state output is no output of the model


def test_oldest_strategy_batches_requests_of_different_sequences(server: RuntimeProcess) -> None:
    ids = [91, 92, 93, 94]
    barrier = threading.Barrier(len(ids))

    def start(sequence_id: int) -> tuple[int, bool]:
        with server.grpc_client() as client:
            barrier.wait(60)
            result = client.infer(
                "seq_oldest", [calls.value_input(grpcclient, 0)], sequence_id=sequence_id, sequence_start=True,
                client_timeout=120,
            )
            return int(result.as_numpy("BATCH")[0][0]), bool(result.as_numpy("STARTED")[0][0])

    with ThreadPoolExecutor(len(ids)) as pool:
        answers = list(pool.map(start, ids))
    assert all(started for _, started in answers)
    assert max(batch for batch, _ in answers) > 1, answers
    with server.grpc_client() as client:
        for sequence_id in ids:
            result = client.infer("seq_oldest", [calls.value_input(grpcclient, 0)], sequence_id=sequence_id, sequence_end=True)
            assert not result.as_numpy("STARTED")[0][0]


def test_ensemble_passes_the_sequence_to_its_stateful_step(server: RuntimeProcess) -> None:
    def send(client: Any, module: Any, value: int, sequence_id: int, start: bool = False, end: bool = False) -> int:
        tensor = module.InferInput("VALUE", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.full((1, 1), value, np.int32))
        result = client.infer("seq_ensemble", [tensor], sequence_id=sequence_id, sequence_start=start, sequence_end=end)
        return int(result.as_numpy("TOTAL")[0][0])

    with server.grpc_client() as g, server.http_client() as h:
        assert send(g, grpcclient, 1, 101, start=True) == 1
        assert send(h, httpclient, 10, 102, start=True) == 10
        assert send(h, httpclient, 2, 101) == 3
        assert send(g, grpcclient, 20, 102) == 30
        assert send(g, grpcclient, 3, 101, end=True) == 6
        assert send(h, httpclient, 30, 102, end=True) == 60
        error = failure(lambda: send(g, grpcclient, 1, 101))
        assert "must specify the START flag" in error.message()
        error = failure(lambda: send(g, grpcclient, 1, 0))
        assert "must specify a non-zero or non-empty correlation ID" in error.message()
    still_serves(server)


def test_bls_call_carries_the_sequence(server: RuntimeProcess) -> None:
    """A Python model without sequence batching sees the request's correlation ID and flags and passes them on
    to a stateful model through BLS (pb_utils.InferenceRequest(correlation_id=..., flags=...))."""
    with server.grpc_client() as client:
        assert calls.sync_send(client, grpcclient, "seq_bls", [1, 2, 3], 111) == [1, 3, 6]
        assert calls.sync_send(client, grpcclient, "seq_bls", [5], "bls-string-id") == [5]


def test_warmup_runs_on_a_sequence_model(server: RuntimeProcess) -> None:
    """seq_state has a model_warmup sample: each sample runs as a sequence of one request, so the model loads."""
    with server.grpc_client() as client:
        assert client.is_model_ready("seq_state")
