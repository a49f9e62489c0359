"""Triton's trace settings, sampling and trace records (runtime/ensemble_runtime/traces.py), without a server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ensemble_runtime.errors import ErrorCode, InferenceError
from ensemble_runtime.stats import ComputeTimes
from ensemble_runtime.traces import (
    MAX_HELD,
    TIMESTAMPS,
    TraceControl,
    TracedTimes,
    TraceSettings,
    grpc_values,
    parse_changes,
    settings_from_flags,
)
from ensemble_runtime.tracing import write

ON = TraceSettings(level=(TIMESTAMPS,), rate=1, file="/tmp/trace.json")


def test_settings_are_written_as_triton_writes_them() -> None:
    assert TraceSettings(file="/t").as_dict() == {
        "trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1", "log_frequency": "0",
        "trace_file": "/t", "trace_mode": "triton"}


@pytest.mark.parametrize(("values", "message"), [
    ({"trace_level": "TIMESTAMPS"}, "expect an array of strings for 'trace_level'"),
    ({"trace_level": ["BOGUS"]}, "unknown trace level 'BOGUS'"),
    ({"trace_level": ["TENSORS"]}, "trace level TENSORS is not supported"),
    ({"trace_rate": 5}, "expect a string for 'trace_rate'"),
    ({"trace_rate": "abc"}, "Unable to parse 'trace_rate', got: abc"),
    ({"trace_rate": "0"}, "'trace_rate' must be an integer from 1"),
    ({"trace_count": "-2"}, "'trace_count' must be an integer from -1"),
    ({"log_frequency": "-1"}, "'log_frequency' must be an integer from 0"),
    ({"log_frequency": str(2**31)}, "'log_frequency' must be an integer from 0 to 2147483647"),
])
def test_wrong_values_are_refused(values: dict[str, object], message: str) -> None:
    with pytest.raises(InferenceError) as refused:
        parse_changes(values)
    assert refused.value.code == ErrorCode.INVALID_ARGUMENT
    assert message in refused.value.message


def test_the_trace_file_cannot_be_changed_and_unknown_names_are_passed_over() -> None:
    with pytest.raises(InferenceError) as refused:
        parse_changes({"trace_file": "/etc/passwd"})
    assert refused.value.code == ErrorCode.UNIMPLEMENTED
    assert parse_changes({"trace_mode": "opentelemetry", "bogus": "1", "trace_rate": None}) == {"rate": None}
    assert parse_changes({"trace_level": ["OFF", "TIMESTAMPS"], "trace_count": "5"}) == {
        "level": (TIMESTAMPS,), "count": 5}


def test_grpc_values_empty_is_null_and_scalars_take_one_value() -> None:
    assert grpc_values({"trace_rate": [], "trace_level": ["TIMESTAMPS"], "trace_count": ["3"]}) == {
        "trace_rate": None, "trace_level": ["TIMESTAMPS"], "trace_count": "3"}
    with pytest.raises(InferenceError, match="expect a single value for 'trace_rate'"):
        grpc_values({"trace_rate": ["1", "2"]})


def test_one_request_in_every_rate_is_traced_while_the_count_lasts() -> None:
    control = TraceControl(TraceSettings(level=(TIMESTAMPS,), rate=3, count=2, file="/t"))
    taken = [control.begin("m", 1, str(i)) for i in range(9)]
    assert [t.request_id if t else None for t in taken] == ["0", None, None, "3", None, None, None, None, None]
    assert control.settings().count == 0 and not control.active
    assert [t.id for t in taken if t] == [1, 2]


def test_due_tells_the_next_sampled_request_and_pass_over_counts_the_others() -> None:
    """The data plane's fast path asks `due` and counts what it takes with `pass_over`: the same requests are
    sampled as when every one goes through `begin`."""
    control = TraceControl(TraceSettings(level=(TIMESTAMPS,), rate=3, count=2, file="/t"))
    sampled = []
    for i in range(9):
        if control.due("m"):
            trace = control.begin("m", 1, str(i))
            assert trace is not None
            sampled.append(trace.request_id)
        else:
            control.pass_over("m")
    assert sampled == ["0", "3"] and not control.due("m") and not control.active


def test_a_model_has_its_own_fields_and_null_clears_them() -> None:
    control = TraceControl(ON)
    assert control.update({"rate": 2}, "a").rate == 2
    assert control.settings().rate == 1
    control.update({"count": 5})  # the global count: the model follows it, not having one of its own
    assert control.settings("a").count == 5
    assert [control.begin("a", 1, str(i)) is not None for i in range(4)] == [True, False, True, False]
    assert control.settings().count == 3  # the model took two from the global count
    control.update({"count": 1}, "a")  # now one of its own
    assert control.begin("a", 1, "x") is not None and control.begin("a", 1, "y") is None
    assert control.settings("a").count == 0 and control.settings().count == 3
    assert control.update({"rate": None, "count": None}, "a") == control.settings()


def test_a_null_global_value_goes_back_to_the_start() -> None:
    control = TraceControl(ON)
    control.update({"rate": 7, "level": ("OFF",)})
    assert not control.active
    assert control.update({"rate": None, "level": None}) == ON and control.active


def test_tracing_needs_a_file() -> None:
    control = TraceControl(TraceSettings())
    with pytest.raises(InferenceError, match="tracing needs a trace file"):
        control.update({"level": (TIMESTAMPS,)})
    with pytest.raises(InferenceError, match="tracing needs a trace file"):
        control.update({"level": (TIMESTAMPS,)}, "m")
    assert control.settings() == TraceSettings() and control.settings("m") == TraceSettings() and not control.active


def test_files_every_log_frequency_requests_then_the_rest_at_stop() -> None:
    control = TraceControl(TraceSettings(level=(TIMESTAMPS,), rate=1, log_frequency=2, file="/t/trace"))
    first = control.begin("e", 1, "r")
    assert first is not None
    step = control.child(first, "m", 3)
    assert (step.parent_id, step.request_id, step.id) == (first.id, "r", 2)
    assert control.finish([first, step], "e") is None  # one request held: its steps do not count
    second = control.begin("m", 3, "s")
    assert second is not None
    assert control.finish([second], "m") == ("/t/trace.0", [first, step, second])
    third = control.begin("m", 3, "t")
    assert third is not None and control.finish([third], "m") is None
    assert control.flush() == ("/t/trace.1", [third])
    assert control.flush() is None


def test_held_traces_are_bounded() -> None:
    control = TraceControl(ON)
    for i in range(MAX_HELD):
        trace = control.begin("m", 1, str(i))
        assert trace is not None and control.finish([trace], "m") is None
    extra = control.begin("m", 1, "extra")
    assert extra is not None and control.finish([extra], "m") is None
    assert control.dropped == 1
    flushed = control.flush()
    assert flushed is not None and flushed[0] == "/tmp/trace.json" and len(flushed[1]) == MAX_HELD


def test_records_and_the_file_are_tritons_shape(tmp_path: Path) -> None:
    control = TraceControl(ON)
    trace = control.begin("m", 2, "req")
    assert trace is not None
    trace.mark("REQUEST_START", 10)
    times = TracedTimes(trace=trace, into=(total := ComputeTimes()))
    times.add(ComputeTimes(1, 2, 3))
    times.ran(11, 12, 14, 17)
    trace.mark("REQUEST_END", 18)
    assert (total.input_ns, total.infer_ns, total.output_ns) == (1, 2, 3)
    path = tmp_path / "trace.json"
    path.write_text("an older file")
    write(str(path), [trace])
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]  # replaced whole, nothing left beside it
    records = json.loads(path.read_text())
    assert records[0] == {"id": 1, "model_name": "m", "model_version": 2, "request_id": "req"}
    assert [(r["id"], r["timestamps"][0]["name"], r["timestamps"][0]["ns"]) for r in records[1:]] == [
        (1, "REQUEST_START", 10), (1, "COMPUTE_START", 11), (1, "COMPUTE_INPUT_END", 12),
        (1, "COMPUTE_OUTPUT_START", 14), (1, "COMPUTE_END", 17), (1, "REQUEST_END", 18)]


def test_a_file_that_cannot_be_written_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write(str(tmp_path / "missing" / "trace.json"), [])
    assert "could not write 0 trace(s)" in caplog.text


@pytest.mark.parametrize(("flags", "expected"), [
    ([], TraceSettings()),
    (["triton,file=/t", "level=TIMESTAMPS", "rate=10", "count=5", "log_frequency=2", "mode=triton"],
     TraceSettings(level=(TIMESTAMPS,), rate=10, count=5, log_frequency=2, file="/t")),
    (["file=/t", "level=timestamps"], TraceSettings(level=(TIMESTAMPS,), file="/t")),
])
def test_start_flags(flags: list[str], expected: TraceSettings) -> None:
    assert settings_from_flags(flags) == expected


@pytest.mark.parametrize(("flags", "message"), [
    (["opentelemetry,file=/t"], "only the 'triton' trace mode"),
    (["mode=opentelemetry"], "only the 'triton' trace mode"),
    (["colour=red"], "expected NAME=VALUE"),
    (["rate=0"], "'trace_rate' must be an integer from 1"),
    (["level=TIMESTAMPS"], "tracing needs a trace file"),
])
def test_wrong_start_flags(flags: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings_from_flags(flags)
