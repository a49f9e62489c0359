"""The Python backend running Triton-style `model.py` fixtures through `load` and `execute`."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ensemble_runtime.backends.base import LoadContext, ModelInitError, ModelInstance
from ensemble_runtime.backends.python import PythonBackend
from ensemble_runtime.config.model_config import ConfigError, apply_defaults, read_config
from ensemble_runtime.errors import ErrorCode, InferenceError
from ensemble_runtime.inference import BackendRequest, BackendResult, Tensor
from ensemble_runtime.responses import ResponseChannel, StreamItem

from .conftest import Harness, Run, config_of, in_process_caller

A = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
B = np.array([0.5, 0.5, 0.5, 0.5], dtype=np.float32)


def add_sub_request(requested: tuple[str, ...] = (), **parameters: Any) -> BackendRequest:
    return BackendRequest(inputs={"INPUT0": A, "INPUT1": B}, requested_outputs=requested, parameters=parameters)


def ok(result: BackendResult) -> dict[str, Tensor]:
    assert not isinstance(result, BaseException), result
    return result


def failed(result: BackendResult) -> InferenceError:
    assert isinstance(result, InferenceError), result
    return result


def test_sync_execute_runs_triton_add_sub(run: Run) -> None:
    async def body(h: Harness) -> None:
        (instance,) = await h.load("add_sub")
        (result,) = await instance.execute([add_sub_request()])
        outputs = ok(result)
        np.testing.assert_array_equal(outputs["OUTPUT0"], A + B)
        np.testing.assert_array_equal(outputs["OUTPUT1"], A - B)
        assert outputs["OUTPUT0"].dtype == np.float32

    run(body)


def test_async_execute_is_awaited(run: Run) -> None:
    async def body(h: Harness) -> None:
        (instance,) = await h.load("async_add")
        results = await instance.execute([add_sub_request(), add_sub_request()])
        for result in results:
            np.testing.assert_array_equal(ok(result)["OUTPUT0"], A + B)

    run(body)


def test_requested_outputs_filter_the_response(run: Run) -> None:
    async def body(h: Harness) -> None:
        (instance,) = await h.load("add_sub")
        (result,) = await instance.execute([add_sub_request(("OUTPUT1",))])
        assert list(ok(result)) == ["OUTPUT1"]

    run(body)


def test_bytes_in_and_out_with_parameters_and_request_id(run: Run) -> None:
    async def body(h: Harness) -> None:
        (instance,) = await h.load("strings")
        text = np.array([[b"ab", b"cde"]], dtype=np.object_)
        first = BackendRequest({"TEXT": text}, (), {"lang": "en", "n": 2}, request_id="r1")
        second = BackendRequest({"TEXT": np.array([[b"x"], [b"yz"]], dtype=np.object_)}, ("UPPER",))
        one, two = await instance.execute([first, second])
        outputs = ok(one)
        assert outputs["UPPER"].dtype == np.object_
        assert outputs["UPPER"].tolist() == [[b"AB", b"CDE"]]
        assert outputs["LENGTH"].tolist() == [[2, 3]]
        params, request_id = outputs["PARAMS"][0].decode().split("|")
        assert json.loads(params) == {"lang": "en", "n": 2}
        assert request_id == "r1"
        assert ok(two) == {"UPPER": ok(two)["UPPER"]}
        assert ok(two)["UPPER"].tolist() == [[b"X"], [b"YZ"]]

    run(body)


def errors_request(mode: str, requested: tuple[str, ...] = ()) -> BackendRequest:
    return BackendRequest({"X": np.array([1.0, 2.0], dtype=np.float32)}, requested, {"mode": mode})


def test_error_response_fails_only_its_request_with_the_code(run: Run) -> None:
    async def body(h: Harness) -> None:
        (instance,) = await h.load("errors")
        good, bad, internal = await instance.execute(
            [errors_request("ok"), errors_request("error_response"), errors_request("error_default")]
        )
        np.testing.assert_array_equal(ok(good)["Y"], [2.0, 4.0])
        assert failed(bad).code is ErrorCode.INVALID_ARGUMENT
        assert failed(bad).message == "X must be positive"
        assert failed(internal).code is ErrorCode.INTERNAL
        assert failed(internal).message == "something broke"

    run(body)


def test_exception_in_execute_fails_the_whole_batch(run: Run) -> None:
    async def body(h: Harness) -> None:
        (instance,) = await h.load("errors")
        results = await instance.execute([errors_request("ok"), errors_request("raise")])
        for result in results:
            assert failed(result).code is ErrorCode.INTERNAL
            assert failed(result).message == "model 'errors': ValueError: cannot handle this batch"

    run(body)


@pytest.mark.parametrize(
    ("mode", "requested", "expected"),
    [
        ("wrong_count", (), "execute() returned 0 responses for 1 requests"),
        ("none", (), "execute() returned NoneType; it must return a list"),
        ("wrong_dtype", (), "output 'Y' has data type FP64 but the model config declares FP32"),
        ("missing_output", ("Y", "Z"), "the response has no output 'Z' (it has: Y)"),
    ],
)
def test_malformed_responses_are_named(run: Run, mode: str, requested: tuple[str, ...], expected: str) -> None:
    async def body(h: Harness) -> None:
        (instance,) = await h.load("errors")
        (result,) = await instance.execute([errors_request(mode, requested)])
        assert expected in failed(result).message
        assert failed(result).message.startswith("model 'errors': ")

    run(body)


def test_finalize_is_called_on_close(run: Run, repo: Path) -> None:
    async def body(h: Harness) -> None:
        (instance,) = await h.load("add_sub")
        await instance.close()
        assert (repo / "add_sub" / "finalized-add_sub_0_0").read_text() == "done"
        await instance.close()  # idempotent

    run(body)


def test_each_instance_is_its_own_object_on_its_own_thread(run: Run) -> None:
    async def body(h: Harness) -> None:
        instances = await h.load("parallel")
        assert len(instances) == 3
        request = BackendRequest({"X": np.array([1], dtype=np.int32)}, ())
        # The model waits on a 3-party barrier: this only completes if the three instances run at once.
        results = await asyncio.gather(*(instance.execute([request]) for instance in instances))
        outputs = [ok(result) for (result,) in results]
        assert len({int(o["INSTANCE"][0]) for o in outputs}) == 3
        assert len({o["THREAD"][0] for o in outputs}) == 3
        assert sorted(o["NAME"][0] for o in outputs) == [
            b"parallel_0_0/CPU",
            b"parallel_0_1/CPU",
            b"parallel_0_2/CPU",
        ]

    run(body)


def test_bls_exec_calls_the_server_in_process(run: Run) -> None:
    async def body(h: Harness) -> None:
        models: dict[str, ModelInstance] = {}
        (models["add_sub"],) = await h.load("add_sub")
        (bls,) = await h.load("bls_sync", caller=in_process_caller(models))
        good, missing = await bls.execute([add_sub_request(), add_sub_request(target="missing")])
        np.testing.assert_array_equal(ok(good)["SUM"], A + B)
        assert failed(missing).code is ErrorCode.NOT_FOUND
        assert failed(missing).message == "model 'missing' is not loaded"

    run(body)


def test_bls_async_exec_from_async_execute(run: Run) -> None:
    async def body(h: Harness) -> None:
        models: dict[str, ModelInstance] = {}
        (models["add_sub"],) = await h.load("add_sub")
        (bls,) = await h.load("bls_async", caller=in_process_caller(models))
        results = await bls.execute([add_sub_request() for _ in range(3)])
        for result in results:
            np.testing.assert_array_equal(ok(result)["SUM"], A + B)

    run(body)


def test_sync_exec_on_the_event_loop_is_refused_not_deadlocked(run: Run) -> None:
    async def body(h: Harness) -> None:
        models: dict[str, ModelInstance] = {}
        (models["add_sub"],) = await h.load("add_sub")
        (bls,) = await h.load("bls_async", caller=in_process_caller(models))
        (result,) = await asyncio.wait_for(bls.execute([add_sub_request(mode="sync_exec")]), timeout=30)
        message = failed(result).message
        assert "BlsUnavailableError" in message
        assert "await request.async_exec()" in message

    run(body)


def test_sibling_modules_import_like_triton_without_colliding(run: Run) -> None:
    async def body(h: Harness) -> None:
        (a,) = await h.load("siblings_a")
        (b,) = await h.load("siblings_b")
        request = BackendRequest({"X": np.array([1], dtype=np.int32)}, ())
        (result_a,) = await a.execute([request])
        (result_b,) = await b.execute([request])
        assert ok(result_a)["WHO"].tolist() == [b"a", b"deep-a", b"a"]
        who_b = ok(result_b)["WHO"].tolist()
        assert who_b[:2] == [b"b", b"b"]
        assert who_b[2].decode().endswith(".model")
        assert "helpers" not in sys.modules
        package = who_b[2].decode().rpartition(".")[0]
        assert package in sys.modules
        await b.close()
        assert not [name for name in sys.modules if name.startswith(package)]

    run(body)


def test_auto_complete_config_fills_the_config(run: Run, repo: Path) -> None:
    async def body(h: Harness) -> None:
        config = config_of(repo, "autocomplete")
        assert [(t.name, list(t.dims)) for t in config.input] == [("X", [-1])]
        assert [t.name for t in config.output] == ["Y"]
        assert config.max_batch_size == 4
        assert config.HasField("dynamic_batching")
        (instance,) = await h.load("autocomplete")
        (result,) = await instance.execute([BackendRequest({"X": np.ones((2, 3), dtype=np.float32)}, ())])
        np.testing.assert_array_equal(ok(result)["Y"], np.full((2, 3), 2.0, dtype=np.float32))

    run(body)


def test_failing_initialize_is_a_model_init_error_naming_the_file(run: Run) -> None:
    async def body(h: Harness) -> None:
        with pytest.raises(ModelInitError, match=r"initialize\(\) in .*bad_init/1/model.py failed: RuntimeError: weights"):
            await h.load("bad_init")
        assert not [name for name in sys.modules if name.startswith("_triton_model_bad_init")]

    run(body)


def test_syntax_error_is_a_config_error_naming_file_and_line(run: Run, repo: Path) -> None:
    async def body(h: Harness) -> None:
        (repo / "bad_init" / "1" / "model.py").write_text("class TritonPythonModel:\n    def execute(self, r)\n")
        with pytest.raises(ConfigError, match=r"syntax error in .*bad_init/1/model.py line 2"):
            await h.load("bad_init")

    run(body)


def test_missing_class_is_a_config_error(run: Run) -> None:
    async def body(h: Harness) -> None:
        with pytest.raises(ConfigError, match=r"no_class/1/model.py defines no class TritonPythonModel"):
            await h.load("no_class")

    run(body)


def test_import_error_is_a_config_error(run: Run, repo: Path) -> None:
    async def body(h: Harness) -> None:
        (repo / "bad_init" / "1" / "model.py").write_text("import not_a_module_anywhere\n")
        with pytest.raises(ConfigError, match=r"importing .*model.py failed: ModuleNotFoundError"):
            await h.load("bad_init")

    run(body)


def test_missing_model_file_is_named(repo: Path) -> None:
    (repo / "empty" / "1").mkdir(parents=True)
    config = apply_defaults(read_config(repo / "bad_init") or pytest.fail("no config"), "empty")
    with pytest.raises(ConfigError, match=r"model file '.*empty/1/model.py' not found"):
        PythonBackend().prepare_config(config, repo / "empty" / "1")


def test_decoupled_model_whose_execute_returns_responses_gets_tritons_error(repo: Path) -> None:
    """A decoupled model must answer through its response senders; add_sub returns a list, so each request
    ends with Triton's error as its final response (the model loads, the request fails, nothing hangs)."""
    config = config_of(repo, "add_sub")
    config.model_transaction_policy.decoupled = True

    async def caller(request: Any) -> Any:
        raise AssertionError("not called")

    async def body() -> list[StreamItem]:
        context = LoadContext(config, 1, repo / "add_sub" / "1", repo / "add_sub", caller)
        (instance,) = await PythonBackend().load(context)
        channel = ResponseChannel(asyncio.get_running_loop())
        request = dataclasses.replace(add_sub_request(), responses=channel)
        assert await instance.execute([request]) == [{}]
        items = [item async for item in channel.items()]
        await instance.close()
        return items

    (item,) = asyncio.run(body())
    assert item.final and item.error is not None
    assert "is using the decoupled mode and the execute function must return None" in item.error.message


def test_execute_inline_runs_on_the_event_loop_thread(run: Run) -> None:
    async def body(h: Harness) -> None:
        (inline,) = await h.load("inline")
        (result,) = await inline.execute([BackendRequest({"X": np.array([1], dtype=np.int32)}, ())])
        assert ok(result)["THREAD"][0] == threading.current_thread().name.encode()  # not the instance's thread

    run(body)
