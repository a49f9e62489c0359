"""`ExecutionPlan.serial`: whether running a plan (a step starts once every step producing its inputs ended) can
ever have two steps in flight. Only a serial run may be carried from step to step by the models' threads."""

from __future__ import annotations

from ensemble_runtime.ensemble.steps import ExecutionPlan, Step, make_plan


def _plan(edges: dict[str, tuple[list[str], list[str]]], outputs: tuple[str, ...]) -> ExecutionPlan:
    """Steps named by model, each `(input tensors, output tensors)`, in the order given (a topological one)."""
    steps = [
        Step(index, model, -1, {f"i{n}": t for n, t in enumerate(ins)}, {f"o{n}": t for n, t in enumerate(outs)})
        for index, (model, (ins, outs)) in enumerate(edges.items())
    ]
    producer = {tensor: step.index for step in steps for tensor in step.output_map.values()}
    return make_plan("e", steps, range(len(steps)), producer, {"IN": False, "IN2": False}, outputs)


def test_a_chain_is_serial() -> None:
    plan = _plan({"a": (["IN"], ["t0"]), "b": (["t0"], ["t1"]), "c": (["t1"], ["OUT"])}, ("OUT",))
    assert plan.serial
    assert _plan({"a": (["IN"], ["OUT"])}, ("OUT",)).serial


def test_a_fan_out_or_two_first_steps_are_not() -> None:
    fan_out = {"a": (["IN"], ["t0"]), "b": (["t0"], ["L"]), "c": (["t0"], ["R"])}
    assert not _plan(fan_out, ("L", "R")).serial
    two_first = {"a": (["IN"], ["L"]), "b": (["IN2"], ["R"]), "c": (["L", "R"], ["OUT"])}
    assert not _plan(two_first, ("OUT",)).serial


def test_a_step_that_waits_for_two_producers_in_a_row_keeps_it_serial() -> None:
    """a -> b -> c and a -> c: c becomes ready only once b ended, so one step is in flight at a time."""
    plan = _plan({"a": (["IN"], ["t0"]), "b": (["t0"], ["t1"]), "c": (["t0", "t1"], ["OUT"])}, ("OUT",))
    assert plan.serial


def test_asking_for_one_branch_of_a_fan_out_makes_its_plan_serial() -> None:
    fan_out = {"a": (["IN"], ["t0"]), "b": (["t0"], ["L"]), "c": (["t0"], ["R"])}
    assert _plan(fan_out, ("L",)).serial
    assert not _plan(fan_out, ("L", "R")).serial
