"""run_ensemble with fake async step callers at the seam: no models, no sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import numpy as np
import pytest
from ensemble_runtime.config.model_config import parse_config_text
from ensemble_runtime.ensemble import EnsembleGraph, Step, build_graph, run_ensemble
from ensemble_runtime.errors import ErrorCode, InferenceError, not_found
from ensemble_runtime.inference import BackendRequest, Tensor

Handler = Callable[[BackendRequest], Awaitable[dict[str, Tensor]]]
GUARD_S = 5.0  # only bounds a hang when the code under test is wrong; nothing waits on it otherwise


def _unary(name: str) -> str:
    return f"""name: "{name}" backend: "python"
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }} ]"""


COMBINE = """name: "combine" backend: "python"
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "DIFF" data_type: TYPE_FP32 dims: [ 4 ] } ]"""

# IN -> left -> a ; IN -> right -> b ; (a, b) -> combine -> SUM, DIFF ; a -> copy -> LEFT
FAN = """
name: "fan" platform: "ensemble"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "DIFF" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "LEFT" data_type: TYPE_FP32 dims: [ 4 ] }
]
ensemble_scheduling { step [
  { model_name: "left" model_version: 2
    input_map { key: "X" value: "IN" } output_map { key: "Y" value: "a" } },
  { model_name: "right" input_map { key: "X" value: "IN" } output_map { key: "Y" value: "b" } },
  { model_name: "combine" input_map [ { key: "A" value: "a" }, { key: "B" value: "b" } ]
    output_map [ { key: "SUM" value: "SUM" }, { key: "DIFF" value: "DIFF" } ] },
  { model_name: "copy" input_map { key: "X" value: "a" } output_map { key: "Y" value: "LEFT" } }
] }
"""

# IN -> pre -> t1 -> cnn -> t2 -> post -> OUT
CHAIN = """
name: "chain" platform: "ensemble"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "pre" input_map { key: "X" value: "IN" } output_map { key: "Y" value: "t1" } },
  { model_name: "cnn" input_map { key: "X" value: "t1" } output_map { key: "Y" value: "t2" } },
  { model_name: "post" input_map { key: "X" value: "t2" } output_map { key: "Y" value: "OUT" } }
] }
"""


def fan_graph() -> EnsembleGraph:
    models = {name: parse_config_text(_unary(name)) for name in ("left", "right", "copy")}
    models["combine"] = parse_config_text(COMBINE)
    return build_graph(parse_config_text(FAN), models, {name: {1, 2} for name in models})


def chain_graph() -> EnsembleGraph:
    models = {name: parse_config_text(_unary(name)) for name in ("pre", "cnn", "post")}
    return build_graph(parse_config_text(CHAIN), models, {name: {1} for name in models})


class FakeModels:
    """The seam: per-model async handlers; records every call it receives."""

    def __init__(self, handlers: dict[str, Handler]) -> None:
        self.handlers = handlers
        self.calls: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []

    async def __call__(self, step: Step, request: BackendRequest) -> dict[str, Tensor]:
        self.calls.append((step.model_name, tuple(sorted(request.inputs)), request.requested_outputs))
        return await self.handlers[step.model_name](request)

    def called(self) -> list[str]:
        return [name for name, _, _ in self.calls]


def unary(fn: Callable[[Tensor], Tensor]) -> Handler:
    async def handle(request: BackendRequest) -> dict[str, Tensor]:
        return {"Y": fn(request.inputs["X"])}

    return handle


async def combine(request: BackendRequest) -> dict[str, Tensor]:
    a, b = request.inputs["A"], request.inputs["B"]
    return {
        name: value for name, value in (("SUM", a + b), ("DIFF", a - b)) if name in request.requested_outputs
    }


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, GUARD_S))


def fan_models() -> FakeModels:
    return FakeModels(
        {
            "left": unary(lambda x: x * 2),
            "right": unary(lambda x: x + 1),
            "combine": combine,
            "copy": unary(lambda x: x.copy()),
        }
    )


IN = np.arange(4, dtype=np.float32)


def test_chain_passes_tensors_through_in_order() -> None:
    models = FakeModels(
        {"pre": unary(lambda x: x + 1), "cnn": unary(lambda x: x * 10), "post": unary(lambda x: -x)}
    )
    out = run(run_ensemble(chain_graph(), {"IN": IN}, [], models, request_id="r1"))
    assert list(out) == ["OUT"]
    np.testing.assert_array_equal(out["OUT"], -((IN + 1) * 10))
    assert models.calls == [("pre", ("X",), ("Y",)), ("cnn", ("X",), ("Y",)), ("post", ("X",), ("Y",))]


def test_fan_out_fan_in_all_outputs() -> None:
    models = fan_models()
    out = run(run_ensemble(fan_graph(), {"IN": IN}, [], models))
    np.testing.assert_array_equal(out["SUM"], IN * 2 + IN + 1)
    np.testing.assert_array_equal(out["DIFF"], IN * 2 - (IN + 1))
    np.testing.assert_array_equal(out["LEFT"], IN * 2)
    assert sorted(models.called()) == ["combine", "copy", "left", "right"]


def test_independent_branches_are_in_flight_together() -> None:
    async def scenario() -> None:
        started = {"left": asyncio.Event(), "right": asyncio.Event()}

        def branch(me: str, other: str) -> Handler:
            async def handle(request: BackendRequest) -> dict[str, Tensor]:
                started[me].set()
                # Run one branch after the other and this never returns: the guard fails the test.
                await started[other].wait()
                return {"Y": request.inputs["X"]}

            return handle

        models = FakeModels(
            {"left": branch("left", "right"), "right": branch("right", "left"), "combine": combine}
        )
        out = await run_ensemble(fan_graph(), {"IN": IN}, ["SUM"], models)
        np.testing.assert_array_equal(out["SUM"], IN + IN)

    run(scenario())


def test_only_steps_needed_for_requested_outputs_run() -> None:
    models = fan_models()
    out = run(run_ensemble(fan_graph(), {"IN": IN}, ["LEFT"], models))
    assert list(out) == ["LEFT"]
    assert sorted(models.called()) == ["copy", "left"]


def test_steps_are_asked_only_for_outputs_someone_uses() -> None:
    models = fan_models()
    out = run(run_ensemble(fan_graph(), {"IN": IN}, ["DIFF"], models))
    assert list(out) == ["DIFF"]
    assert ("combine", ("A", "B"), ("DIFF",)) in models.calls
    assert "copy" not in models.called()


def test_failing_step_fails_request_and_cancels_the_rest() -> None:
    async def scenario() -> None:
        tasks_before = asyncio.all_tasks()
        right_started = asyncio.Event()
        right_cancelled = asyncio.Event()

        async def left(request: BackendRequest) -> dict[str, Tensor]:
            await right_started.wait()  # fail only once the other branch is in flight
            raise not_found("weights file missing")

        async def right(request: BackendRequest) -> dict[str, Tensor]:
            right_started.set()
            try:
                await asyncio.Event().wait()  # never finishes on its own
            except asyncio.CancelledError:
                right_cancelled.set()
                raise
            raise AssertionError("unreachable")

        models = FakeModels({"left": left, "right": right, "combine": combine})
        with pytest.raises(InferenceError) as caught:
            await run_ensemble(fan_graph(), {"IN": IN}, ["SUM"], models)
        assert caught.value.code is ErrorCode.NOT_FOUND
        assert caught.value.message == (
            "ensemble 'fan' step 0 (model 'left' version 2) failed: weights file missing"
        )
        assert right_cancelled.is_set()  # cancelled and unwound before the error reached us
        assert "combine" not in models.called()
        # nothing of this request is left running
        assert asyncio.all_tasks() == tasks_before

    run(scenario())


def test_unexpected_exception_becomes_internal_error_naming_the_step() -> None:
    async def broken(request: BackendRequest) -> dict[str, Tensor]:
        raise RuntimeError("CUDA error: out of memory")

    models = FakeModels({"pre": unary(lambda x: x), "cnn": broken, "post": unary(lambda x: x)})
    with pytest.raises(InferenceError) as caught:
        run(run_ensemble(chain_graph(), {"IN": IN}, [], models))
    assert caught.value.code is ErrorCode.INTERNAL
    assert caught.value.message == (
        "ensemble 'chain' step 1 (model 'cnn' latest version) failed: RuntimeError: CUDA error: out of memory"
    )
    assert models.called() == ["pre", "cnn"]


def test_missing_step_output_names_step_and_output() -> None:
    async def forgetful(request: BackendRequest) -> dict[str, Tensor]:
        return {"Z": request.inputs["X"]}

    models = FakeModels({"pre": forgetful, "cnn": unary(lambda x: x), "post": unary(lambda x: x)})
    with pytest.raises(InferenceError) as caught:
        run(run_ensemble(chain_graph(), {"IN": IN}, [], models))
    assert caught.value.code is ErrorCode.INTERNAL
    message = caught.value.message
    assert message.startswith("ensemble 'chain' step 0 (model 'pre' latest version) failed: ")
    assert "did not return output 'Y'" in message
    assert models.called() == ["pre"]


def test_missing_input_and_unknown_output_are_invalid_requests() -> None:
    models = fan_models()
    with pytest.raises(InferenceError) as caught:
        run(run_ensemble(fan_graph(), {}, [], models))
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert "missing input 'IN'" in caught.value.message
    with pytest.raises(InferenceError) as caught:
        run(run_ensemble(fan_graph(), {"IN": IN}, ["SUMM"], models))
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert "no output 'SUMM'" in caught.value.message
    assert models.calls == []


def test_request_id_and_parameters_reach_every_step() -> None:
    seen: list[tuple[str, dict[str, object]]] = []

    async def record(request: BackendRequest) -> dict[str, Tensor]:
        seen.append((request.request_id, dict(request.parameters)))
        return {"Y": request.inputs["X"]}

    models = FakeModels({"pre": record, "cnn": record, "post": record})
    run(run_ensemble(chain_graph(), {"IN": IN}, [], models, request_id="abc", parameters={"priority": 2}))
    assert seen == [("abc", {"priority": 2})] * 3


def test_cancelling_the_request_cancels_running_steps() -> None:
    async def scenario() -> None:
        in_flight = {"left": asyncio.Event(), "right": asyncio.Event()}
        cancelled: list[str] = []

        def hang(name: str) -> Handler:
            async def handle(request: BackendRequest) -> dict[str, Tensor]:
                in_flight[name].set()
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    cancelled.append(name)
                    raise
                raise AssertionError("unreachable")

            return handle

        models = FakeModels({"left": hang("left"), "right": hang("right"), "combine": combine})
        request = asyncio.create_task(run_ensemble(fan_graph(), {"IN": IN}, ["SUM"], models))
        await in_flight["left"].wait()
        await in_flight["right"].wait()
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        assert sorted(cancelled) == ["left", "right"]

    run(scenario())


def test_optional_ensemble_input_left_out_is_not_passed_on() -> None:
    ensemble = parse_config_text(CHAIN)
    hint = ensemble.input.add(name="HINT", data_type=ensemble.input[0].data_type, optional=True)
    hint.dims.append(4)
    ensemble.ensemble_scheduling.step[0].input_map["H"] = "HINT"
    models = {name: parse_config_text(_unary(name)) for name in ("pre", "cnn", "post")}
    extra = models["pre"].input.add(name="H", data_type=ensemble.input[0].data_type, optional=True)
    extra.dims.append(4)
    graph = build_graph(ensemble, models, {})
    fake = FakeModels({name: unary(lambda x: x) for name in ("pre", "cnn", "post")})
    run(run_ensemble(graph, {"IN": IN}, [], fake))
    run(run_ensemble(graph, {"IN": IN, "HINT": IN}, [], fake))
    assert [inputs for name, inputs, _ in fake.calls if name == "pre"] == [("X",), ("H", "X")]
