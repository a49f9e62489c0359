"""EnsembleRun (an ensemble request without a task) with step callers at the seam that answer at once (a step that
ran inline) or later, in an order the test picks: no models, no loop, no sleeps."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ensemble_runtime.ensemble import Step
from ensemble_runtime.ensemble.executor import EnsembleRun
from ensemble_runtime.errors import ErrorCode, InferenceError, not_found, unavailable
from ensemble_runtime.inference import BackendRequest, Tensor

from tests.unit.ensemble.test_ensemble_executor import IN, chain_graph, fan_graph

Done = Callable[[dict[str, Tensor] | Exception], None]
Model = Callable[[BackendRequest], dict[str, Tensor]]


class Steps:
    """The seam: runs each step's model (a plain function) when the test says so, or at once (`inline`)."""

    def __init__(self, models: dict[str, Model], inline: bool = False) -> None:
        self.models = models
        self.inline = inline
        self.pending: dict[str, tuple[BackendRequest, Done]] = {}
        self.calls: list[str] = []
        self.outcomes: list[dict[str, Tensor] | Exception] = []

    def submit(self, step: Step, request: BackendRequest, done: Done) -> None:
        self.calls.append(step.model_name)
        if self.inline:
            done(self._run(step.model_name, request))
        else:
            self.pending[step.model_name] = (request, done)

    def end(self, name: str) -> None:
        request, done = self.pending.pop(name)
        done(self._run(name, request))

    def _run(self, name: str, request: BackendRequest) -> dict[str, Tensor] | Exception:
        try:
            return self.models[name](request)
        except Exception as exc:
            return exc

    def finish(self, outcome: dict[str, Tensor] | Exception) -> None:
        self.outcomes.append(outcome)


def unary(fn: Callable[[Tensor], Tensor]) -> Model:
    return lambda request: {"Y": fn(request.inputs["X"])}


def combine(request: BackendRequest) -> dict[str, Tensor]:
    a, b = request.inputs["A"], request.inputs["B"]
    return {n: v for n, v in (("SUM", a + b), ("DIFF", a - b)) if n in request.requested_outputs}


def fan_models() -> dict[str, Model]:
    return {"left": unary(lambda x: x * 2), "right": unary(lambda x: x + 1), "combine": combine,
            "copy": unary(lambda x: x.copy())}


@pytest.mark.parametrize("inline", [True, False])
def test_chain_runs_in_order_whether_steps_end_at_once_or_later(inline: bool) -> None:
    steps = Steps({"pre": unary(lambda x: x + 1), "cnn": unary(lambda x: x * 10), "post": unary(lambda x: -x)}, inline)
    EnsembleRun(chain_graph(), {"IN": IN}, [], steps.submit, steps.finish, request_id="r1").start()
    for name in ("pre", "cnn", "post") if not inline else ():
        assert list(steps.pending) == [name]  # one at a time: the next needs this one's output
        steps.end(name)
    (outcome,) = steps.outcomes
    assert isinstance(outcome, dict) and list(outcome) == ["OUT"]
    np.testing.assert_array_equal(outcome["OUT"], -((IN + 1) * 10))
    assert steps.calls == ["pre", "cnn", "post"]


def test_fan_out_fan_in_in_any_order_of_ends() -> None:
    steps = Steps(fan_models())
    EnsembleRun(fan_graph(), {"IN": IN}, [], steps.submit, steps.finish).start()
    assert sorted(steps.pending) == ["left", "right"]  # the independent branches are in flight together
    steps.end("right")
    assert sorted(steps.pending) == ["left"]  # combine waits for both
    steps.end("left")
    assert sorted(steps.pending) == ["combine", "copy"]
    steps.end("copy")
    assert steps.outcomes == []  # not before the last step
    steps.end("combine")
    (outcome,) = steps.outcomes
    assert isinstance(outcome, dict)
    np.testing.assert_array_equal(outcome["SUM"], IN * 2 + IN + 1)
    np.testing.assert_array_equal(outcome["DIFF"], IN * 2 - (IN + 1))
    np.testing.assert_array_equal(outcome["LEFT"], IN * 2)


def test_a_failing_step_fails_the_request_once_the_others_in_flight_ended() -> None:
    """As `run_ensemble` unwinds its in-flight steps before raising: the version set stays held until then."""
    models = fan_models()
    models["left"] = lambda request: (_ for _ in ()).throw(not_found("weights file missing"))
    steps = Steps(models)
    EnsembleRun(fan_graph(), {"IN": IN}, ["SUM"], steps.submit, steps.finish).start()
    steps.end("left")
    assert steps.outcomes == []  # right is still in flight
    steps.end("right")
    (outcome,) = steps.outcomes
    assert isinstance(outcome, InferenceError) and outcome.code is ErrorCode.NOT_FOUND
    assert outcome.message == "ensemble 'fan' step 0 (model 'left' version 2) failed: weights file missing"
    assert "combine" not in steps.calls and not steps.pending


def test_step_failures_are_named_as_run_ensemble_names_them() -> None:
    def broken(request: BackendRequest) -> dict[str, Tensor]:
        raise RuntimeError("CUDA error: out of memory")

    steps = Steps({"pre": unary(lambda x: x), "cnn": broken, "post": unary(lambda x: x)}, inline=True)
    EnsembleRun(chain_graph(), {"IN": IN}, [], steps.submit, steps.finish).start()
    (outcome,) = steps.outcomes
    assert isinstance(outcome, InferenceError) and outcome.code is ErrorCode.INTERNAL
    assert outcome.message == (
        "ensemble 'chain' step 1 (model 'cnn' latest version) failed: RuntimeError: CUDA error: out of memory"
    )
    forgetful = Steps({"pre": lambda request: {"Z": request.inputs["X"]}}, inline=True)
    EnsembleRun(chain_graph(), {"IN": IN}, [], forgetful.submit, forgetful.finish).start()
    (outcome,) = forgetful.outcomes
    assert isinstance(outcome, InferenceError) and "did not return output 'Y'" in outcome.message
    assert forgetful.calls == ["pre"]


def test_a_step_that_cannot_be_submitted_fails_the_request() -> None:
    """A step whose version is gone (its submit raises) ends the request with that error, named by the step."""
    calls: list[str] = []

    def submit(step: Step, request: BackendRequest, done: Done) -> None:
        calls.append(step.model_name)
        raise unavailable("model 'pre' version 1 is not loaded")

    outcomes: list[dict[str, Tensor] | Exception] = []
    EnsembleRun(chain_graph(), {"IN": IN}, [], submit, outcomes.append).start()
    (outcome,) = outcomes
    assert isinstance(outcome, InferenceError) and outcome.code is ErrorCode.UNAVAILABLE
    assert outcome.message.startswith("ensemble 'chain' step 0 (model 'pre' latest version) failed: ")
    assert calls == ["pre"]


def test_missing_input_is_refused_before_any_step() -> None:
    steps = Steps(fan_models())
    with pytest.raises(InferenceError, match="missing input 'IN'") as caught:
        EnsembleRun(fan_graph(), {}, [], steps.submit, steps.finish)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert steps.calls == [] and steps.outcomes == []


def test_request_id_and_parameters_reach_every_step() -> None:
    seen: list[tuple[str, dict[str, object]]] = []

    def record(request: BackendRequest) -> dict[str, Tensor]:
        seen.append((request.request_id, dict(request.parameters)))
        return {"Y": request.inputs["X"]}

    steps = Steps({"pre": record, "cnn": record, "post": record}, inline=True)
    EnsembleRun(chain_graph(), {"IN": IN}, [], steps.submit, steps.finish, request_id="abc",
                parameters={"priority": 2}).start()
    assert seen == [("abc", {"priority": 2})] * 3
