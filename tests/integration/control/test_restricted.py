"""Triton's --http-restricted-api / --grpc-restricted-protocol: a restricted category needs its header.

Before: the flags did not exist (the runtime refused to start with them) and every API was open to anyone who
could reach the ports.
"""

from __future__ import annotations

import contextlib
import functools
import json
import queue
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.integration.control.support import Layout, assert_serves, build, http, load_body, x_input
from tests.support.runtime_process import RuntimeProcess

KEY, VALUE = "x-ensemble-control", "s3cret-token"
GRPC_HEADER = f"triton-grpc-protocol-{KEY}"
HTTP_REFUSED = {"error": f"This API is restricted, expecting header '{KEY}'"}
GRPC_REFUSED = f"This protocol is restricted, expecting header '{GRPC_HEADER}'"


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    return build(tmp_path_factory.mktemp("restricted"))


@pytest.fixture(scope="module")
def server(layout: Layout) -> Iterator[RuntimeProcess]:
    args = ["--model-control-mode=explicit", "--load-model=good",
            f"--http-restricted-api=model-repository:{KEY}={VALUE}",
            f"--grpc-restricted-protocol=model-repository,statistics:{KEY}={VALUE}",
            "--grpc-restricted-protocol=model-config:other-key=other-value"]
    with RuntimeProcess([layout.root], args) as proc:
        proc.wait_model_ready("good")
        yield proc


@pytest.mark.parametrize("method,path,body", [
    ("POST", "/v2/repository/index", b"{}"),
    ("POST", "/v2/repository/models/good/load", load_body()),
    ("POST", "/v2/repository/models/good/unload", b"{}"),
    ("GET", "/v2/repository/status", None),
    ("GET", "/v2/ensembles/good/versions", None),
])
def test_http_restricted_routes_need_the_header(server: RuntimeProcess, method: str, path: str,
                                                body: bytes | None) -> None:
    for headers in ({}, {KEY: "wrong"}, {KEY: VALUE + "x"}, {KEY: VALUE[:-1]}, {"other": VALUE}):
        status, answer = http(server.http_url, method, path, body, headers)
        assert (status, json.loads(answer)) == (403, HTTP_REFUSED), (headers, answer)
    status, answer = http(server.http_url, method, path, body, {KEY.upper(): VALUE})  # header names: any case
    assert status != 403, answer
    if path.endswith("/unload"):
        assert status == 200, answer
        status, answer = http(server.http_url, "POST", "/v2/repository/models/good/load", load_body(), {KEY: VALUE})
        assert status == 200, answer
    assert_serves(server.grpc_url)


def test_http_other_categories_stay_open(server: RuntimeProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("good")
        assert client.get_server_metadata()["name"]
        assert client.get_model_metadata("good")["name"] == "good"
        assert client.get_model_config("good")["name"] == "good"  # model-config is restricted on gRPC only
        assert client.get_inference_statistics("good")["model_stats"]
        item = httpclient.InferInput("X", [2], "FP32")
        item.set_data_from_numpy(np.array([1.0, 2.0], np.float32))
        assert client.infer("good", [item]).as_numpy("Y").tolist() == [1.0, 2.0]
        index = client.get_model_repository_index(headers={KEY: VALUE})
        assert any(m["name"] == "good" for m in index)
    finally:
        client.close()


def test_grpc_restricted_rpcs_need_the_metadata(server: RuntimeProcess) -> None:
    with server.grpc_client() as client:
        calls: dict[str, Callable[[dict[str, str] | None], object]] = {
            "index": lambda h: client.get_model_repository_index(headers=h),
            "load": lambda h: client.load_model("good", headers=h),
            "unload": lambda h: client.unload_model("good", headers=h),
            "statistics": lambda h: client.get_inference_statistics("good", headers=h),
        }
        for name, call in calls.items():
            for headers in (None, {GRPC_HEADER: "wrong"}, {KEY: VALUE}, {GRPC_HEADER: VALUE + "x"}):
                with pytest.raises(InferenceServerException) as refused:
                    call(headers)
                assert (refused.value.status(), refused.value.message()) == ("StatusCode.UNAVAILABLE", GRPC_REFUSED), (
                    name, headers)
            call({GRPC_HEADER: VALUE})
            if name == "unload":
                client.load_model("good", headers={GRPC_HEADER: VALUE})
        # a second group with its own header
        with pytest.raises(InferenceServerException) as refused:
            client.get_model_config("good", headers={GRPC_HEADER: VALUE})
        assert refused.value.message() == "This protocol is restricted, expecting header 'triton-grpc-protocol-other-key'"
        assert client.get_model_config("good", headers={"triton-grpc-protocol-other-key": "other-value"})
        # what is not restricted stays open
        assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("good")
        assert client.get_server_metadata().name and client.get_model_metadata("good").name == "good"
        assert client.infer("good", x_input()).as_numpy("Y").tolist() == [1.5, -2.0]
    assert_serves(server.grpc_url)


def test_grpc_bytes_that_do_not_decode_meet_the_restriction_first(server: RuntimeProcess) -> None:
    """A restricted RPC is refused before its body is decoded, garbage or not; with the header, the body is
    decoded and garbage is INVALID_ARGUMENT (the decode guard is behind the restriction, on every method)."""
    garbage = b"\xff\xff\xff"
    with grpc.insecure_channel(server.grpc_url) as channel:
        index = channel.unary_unary("/inference.GRPCInferenceService/RepositoryIndex")
        with pytest.raises(grpc.RpcError) as refused:
            index(garbage, timeout=30)
        assert (refused.value.code(), refused.value.details()) == (grpc.StatusCode.UNAVAILABLE, GRPC_REFUSED)
        with pytest.raises(grpc.RpcError) as invalid:
            index(garbage, timeout=30, metadata=[(GRPC_HEADER, VALUE)])
        assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "RepositoryIndex request is not a valid protobuf message" in (invalid.value.details() or "")
    assert_serves(server.grpc_url)


def test_grpc_stream_infer_stays_open(server: RuntimeProcess) -> None:
    results: list[object] = []
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: results.append(error or result))
        client.async_stream_infer("good", x_input())
        client.stop_stream()
    assert len(results) == 1 and isinstance(results[0], grpcclient.InferResult), results


def _exit_of(repository: Path, args: list[str]) -> tuple[int, str]:
    command, env = RuntimeProcess([repository], args).command()
    done = subprocess.run(list(command), env=dict(env), capture_output=True, text=True, timeout=120, check=False)
    return done.returncode, done.stderr


@pytest.mark.parametrize("flag,message", [
    ("--http-restricted-api=model-repo:k=v", "unknown category 'model-repo'"),
    ("--grpc-restricted-protocol=model-repository", "expected <category>[,<category>...]:<key>=<value>"),
    ("--http-restricted-api=health:k=", "has an empty value"),
    ("--http-restricted-api=model-repository:k=$(ENSEMBLE_CONTROL_TOKEN)", "unexpanded variable reference"),
    ("--http-restricted-api=health,statistics:a=1 --http-restricted-api=statistics:b=2",
     "category 'statistics' is named in more than one restricted group"),
])
def test_malformed_flags_stop_the_server_with_a_clear_error(tmp_path: Path, flag: str, message: str) -> None:
    code, stderr = _exit_of(tmp_path, flag.split(" "))
    assert code == 2 and message in stderr, (code, stderr)


def _put(results: queue.Queue[object], result: object, error: object) -> None:
    results.put(error or result)


def test_restricted_inference_covers_the_stream(layout: Layout) -> None:
    """A bidirectional stream is refused as a whole (before any request is decoded) without the metadata."""
    args = ["--model-control-mode=explicit", "--load-model=good", "--grpc-restricted-protocol=inference:k=v"]
    with RuntimeProcess([layout.root], args) as proc:
        proc.wait_model_ready("good")
        for headers, expect_ok in ((None, False), ({"triton-grpc-protocol-k": "v"}, True)):
            results: queue.Queue[object] = queue.Queue()
            with grpcclient.InferenceServerClient(proc.grpc_url) as client:
                client.start_stream(callback=functools.partial(_put, results), headers=headers)
                with contextlib.suppress(InferenceServerException):  # the stream may already be closed
                    client.async_stream_infer("good", x_input())
                outcome = results.get(timeout=60)
                client.stop_stream()
            if expect_ok:
                assert isinstance(outcome, grpcclient.InferResult), outcome
            else:
                assert isinstance(outcome, InferenceServerException), outcome
                assert outcome.message() == "This protocol is restricted, expecting header 'triton-grpc-protocol-k'"
        with proc.grpc_client() as client:
            with pytest.raises(InferenceServerException, match="This protocol is restricted"):
                client.infer("good", x_input())
            assert client.is_server_ready()  # health stays open
            assert client.infer("good", x_input(), headers={"triton-grpc-protocol-k": "v"}).as_numpy("Y") is not None
