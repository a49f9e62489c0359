"""Repository control (load and unload, gRPC and HTTP) answers only in explicit mode, as in Triton.

Before: load and unload worked in every mode, `poll` (what the operator runs) included, so anyone who could
reach the port could load a config override and run code.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from tritonclient.utils import InferenceServerException

from tests.integration.control.support import assert_serves, build, http, load_body
from tests.support.runtime_process import RuntimeProcess

REFUSED = "explicit model load / unload is not allowed if polling is enabled"


@pytest.mark.parametrize("mode", ["none", "poll"])
def test_load_and_unload_are_refused_outside_explicit_mode(tmp_path: Path, mode: str) -> None:
    layout = build(tmp_path)
    evil = layout.override(default_model_filename=str(layout.evil))
    with RuntimeProcess([layout.root], [f"--model-control-mode={mode}", "--repository-poll-secs=1"]) as proc:
        proc.wait_model_ready("good")
        with proc.grpc_client() as client:
            calls: tuple[Callable[[], object], ...] = (
                lambda: client.load_model("good"), lambda: client.load_model("good", config=evil),
                lambda: client.unload_model("good"), lambda: client.load_model("no_such_model"))
            for call in calls:
                with pytest.raises(InferenceServerException) as refused:
                    call()
                assert (refused.value.status(), refused.value.message()) == ("StatusCode.UNAVAILABLE", REFUSED)
        for path, body in (("/v2/repository/models/good/load", load_body()),
                           ("/v2/repository/models/good/load", load_body(evil)),
                           ("/v2/repository/models/good/unload", b"{}"),
                           ("/v2/repository/models/good/load", b"{not json")):
            status, answer = http(proc.http_url, "POST", path, body)
            assert (status, json.loads(answer)) == (503, {"error": REFUSED}), (path, answer)
        assert not layout.marker.exists(), "the file outside the repository ran"
        with proc.grpc_client() as client:
            assert client.is_model_ready("good")  # the unload was refused: still served
            assert client.is_server_ready()
        # the index stays readable in every mode (the operator reads it in poll mode)
        status, answer = http(proc.http_url, "POST", "/v2/repository/index", b"{}")
        assert status == 200 and any(m["name"] == "good" for m in json.loads(answer)), answer
        assert_serves(proc.grpc_url)


def test_explicit_mode_still_loads_and_unloads(tmp_path: Path) -> None:
    layout = build(tmp_path)
    with RuntimeProcess([layout.root], ["--model-control-mode=explicit"]) as proc:
        proc.wait_live(60)
        status, answer = http(proc.http_url, "POST", "/v2/repository/models/good/load", load_body())
        assert status == 200, answer
        assert_serves(proc.grpc_url)
        with proc.grpc_client() as client:
            client.unload_model("good")
            client.load_model("good")
        assert_serves(proc.grpc_url)
