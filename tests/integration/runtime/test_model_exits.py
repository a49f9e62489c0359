"""A Python model that tries to end the process (sys.exit, KeyboardInterrupt, any BaseException, os._exit)
fails itself, never the server: real runtime processes, real requests over gRPC and HTTP."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from ensemble_runtime.load_journal import DIED_LOADING
from tritonclient.utils import InferenceServerException

from tests.support.runtime_process import RuntimeProcess

MODEL = Path(__file__).parent / "models" / "py_dies" / "model.py"
CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
BATCHED = """
backend: "python"
max_batch_size: 4
dynamic_batching { }
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
INLINE = CONFIG + 'parameters { key: "EXECUTE_INLINE" value: { string_value: "true" } }\n'
RAISED = {"exit": "SystemExit(3)", "interrupt": "KeyboardInterrupt()", "base": "ModelEnded("}

LOAD_TIME = {f"{where}_{how}": (where, how) for where in ("import", "initialize") for how in RAISED}
EXECUTE_TIME = {
    **{f"execute_{how}": ("execute", how, CONFIG) for how in RAISED},
    **{f"async_execute_{how}": ("async_execute", how, CONFIG) for how in ("exit", "interrupt")},
    **{f"inline_execute_{how}": ("execute", how, INLINE) for how in ("exit", "interrupt")},
    "batched_execute_exit": ("execute", "exit", BATCHED),
}


def add_version(root: Path, name: str, version: int, how: str, config: str = CONFIG) -> None:
    directory = root / name / str(version)
    directory.mkdir(parents=True, exist_ok=True)
    (root / name / "config.pbtxt").write_text(config)
    shutil.copy(MODEL, directory / "model.py")
    (directory / "how.txt").write_text(how)


def build(root: Path) -> Path:
    add_version(root, "good", 1, "ok")
    for name, (where, how) in LOAD_TIME.items():
        add_version(root, name, 1, f"{where}:{how}")
    for name, (where, how, config) in EXECUTE_TIME.items():
        add_version(root, name, 1, f"{where}:{how}", config)
    add_version(root, "finalize_exit", 1, "finalize:exit")
    return root


def grpc_x(value: float, batched: bool = False) -> list[grpcclient.InferInput]:
    shape = [1, 1] if batched else [1]
    item = grpcclient.InferInput("X", shape, "FP32")
    item.set_data_from_numpy(np.full(shape, value, np.float32))
    return [item]


def http_x(value: float) -> list[httpclient.InferInput]:
    item = httpclient.InferInput("X", [1], "FP32")
    item.set_data_from_numpy(np.full([1], value, np.float32))
    return [item]


def assert_good_answers(proc: RuntimeProcess, name: str = "good", expected: float = 2.0) -> None:
    """The server is alive and answers a good request over both transports."""
    assert proc.proc is not None and proc.proc.poll() is None, proc.log_text()[-4000:]
    with proc.grpc_client() as client:
        assert float(client.infer(name, grpc_x(1.0)).as_numpy("Y")[0]) == expected
    with proc.http_client() as client:
        assert float(client.infer(name, http_x(1.0)).as_numpy("Y")[0]) == expected


def index_of(proc: RuntimeProcess) -> dict[tuple[str, str], dict[str, str]]:
    """The repository index from gRPC, checked equal to the one from HTTP: (name, version) -> entry. The index may be
    changing (a version being retired), so the HTTP read is compared only when the gRPC reads just before and just
    after it agree: both transports then read the same state."""
    for _ in range(50):
        with proc.grpc_client() as client:
            grpc_models = client.get_model_repository_index(as_json=True)["models"]
            with proc.http_client() as http:
                http_models = http.get_model_repository_index()
            if client.get_model_repository_index(as_json=True)["models"] != grpc_models:
                continue  # changed meanwhile: read again
        by_grpc = {(m["name"], m.get("version", "")): m.get("reason", "") for m in grpc_models}
        by_http = {(m["name"], m.get("version", "")): m.get("reason", "") for m in http_models}
        assert by_grpc == by_http
        return {(m["name"], m.get("version", "")): m for m in grpc_models}
    raise AssertionError("the repository index changed at every read")


def model_ready(proc: RuntimeProcess, name: str, version: str) -> bool:
    with proc.grpc_client() as client:
        return bool(client.is_model_ready(name, version))


def wait_for(check: Callable[[], bool], what: str, proc: RuntimeProcess, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        assert proc.proc is not None and proc.proc.poll() is None, f"server died:\n{proc.log_text()[-4000:]}"
        time.sleep(0.1)
    raise TimeoutError(f"{what} not reached after {timeout}s:\n{proc.log_text()[-4000:]}")


def test_a_model_ending_the_process_while_loading_fails_only_that_model(tmp_path: Path) -> None:
    repo = build(tmp_path / "repo")
    names = ["good", *LOAD_TIME]
    with RuntimeProcess([repo], ["--model-control-mode=explicit", *(f"--load-model={n}" for n in names),
                                 "--strict-readiness=false"]) as proc:
        proc.wait_model_ready("good", timeout=120)
        wait_for(lambda: all((n, "1") in index_of(proc) for n in LOAD_TIME), "every model tried", proc)
        index = index_of(proc)
        log = proc.log_text()
        for name, (_, how) in LOAD_TIME.items():
            entry = index[(name, "1")]
            assert entry["state"] == "UNAVAILABLE", entry
            assert f"model '{name}' version 1" in entry["reason"] and RAISED[how] in entry["reason"], entry
            assert f"model '{name}'" in log and RAISED[how] in log
        assert index[("good", "1")]["state"] == "READY"
        # an explicit load of one of them again: a clear error, and the server stays up
        with proc.grpc_client() as client, pytest.raises(InferenceServerException, match="SystemExit"):
            client.load_model("initialize_exit")
        assert_good_answers(proc)


def test_a_model_ending_the_process_in_execute_fails_only_that_request(tmp_path: Path) -> None:
    repo = build(tmp_path / "repo")
    names = ["good", "finalize_exit", *EXECUTE_TIME]
    with RuntimeProcess([repo], ["--model-control-mode=explicit", *(f"--load-model={n}" for n in names)]) as proc:
        proc.wait_ready(timeout=120)
        for name, (_, how, config) in EXECUTE_TIME.items():
            expected = f"model '{name}' version 1: execute raised {RAISED[how]}"
            with proc.grpc_client() as client, pytest.raises(InferenceServerException) as grpc_info:
                client.infer(name, grpc_x(1.0, batched=config is BATCHED))
            assert grpc_info.value.status() == "StatusCode.INTERNAL", grpc_info.value
            assert expected in str(grpc_info.value.message()), grpc_info.value
            if config is not BATCHED:
                with proc.http_client() as http, pytest.raises(InferenceServerException) as http_info:
                    http.infer(name, http_x(1.0))
                assert expected in str(http_info.value.message()), http_info.value
            assert_good_answers(proc)
            assert expected in proc.log_text()
        # finalize raising SystemExit on unload
        with proc.grpc_client() as client:
            client.unload_model("finalize_exit")
            wait_for(lambda: "finalize raised SystemExit(3)" in proc.log_text(), "finalize ran", proc)
        assert_good_answers(proc)


def test_a_version_that_killed_the_process_is_skipped_after_the_restart(tmp_path: Path) -> None:
    """os._exit in version 2's initialize cannot be caught: the process dies once; after the restart the load
    journal marks version 2 UNAVAILABLE, version 1 serves, and a fixed version 2 (new content) loads."""
    repo = tmp_path / "repo"
    add_version(repo, "flaky", 1, "ok")
    add_version(repo, "flaky", 2, "initialize:os_exit")
    cache = tmp_path / "cache"
    args = ["--model-control-mode=poll", "--repository-poll-secs=0.5", f"--model-cache-dir={cache}"]

    first = RuntimeProcess([repo], args)
    with contextlib.suppress(RuntimeError):  # it may die before it answers as live
        first.start(timeout=120)
    assert first.proc is not None
    assert first.proc.wait(timeout=120) == 1
    first.stop()
    journal = json.loads((cache / "load-journal").read_text())
    assert [(e["model"], e["version"]) for e in journal["loading"]] == [("flaky", 2)]

    with RuntimeProcess([repo], args) as proc:
        proc.wait_model_ready("flaky", timeout=120)
        assert_good_answers(proc, "flaky", 2.0)  # version 1: X + 1
        entry = index_of(proc)[("flaky", "2")]
        assert (entry["state"], entry["reason"]) == ("UNAVAILABLE", DIED_LOADING)
        assert f"model 'flaky' version 2: {DIED_LOADING}" in proc.log_text()
        # polls find version 2 wanted and not served, and do not try it again (the process stays up)
        wait_for(lambda: proc.log_text().count("repository poll: changes in flaky") >= 3, "three polls", proc)
        assert index_of(proc)[("flaky", "2")]["reason"] == DIED_LOADING
        assert_good_answers(proc, "flaky", 2.0)

        (repo / "flaky" / "2" / "how.txt").write_text("ok")  # a fixed upload: new fingerprint
        proc.wait_model_ready("flaky", timeout=120, version="2")
        wait_for(lambda: not model_ready(proc, "flaky", "1"), "version 1 retired", proc)
        assert_good_answers(proc, "flaky", 3.0)  # version 2: X + 2
        assert json.loads((cache / "load-journal").read_text())["loading"] == []
