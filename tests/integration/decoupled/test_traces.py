"""Traces of decoupled requests (Triton's trace extension) on a real runtime: a decoupled model's request over
ModelStreamInfer is traced with one INFER_RESPONSE_COMPLETE per response it sends, and a decoupled ensemble's
with one per response of the ensemble, its steps traced as its children (the decoupled step with its own
responses, the step after it once per response)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tests.integration.decoupled.streams import Stream, repeat_inputs, tensor
from tests.support.runtime_process import RuntimeProcess
from tests.support.traces import wait_traces

MODELS = Path(__file__).parent / "models"
WAIT = 60.0  # seconds: a loaded 2-core machine


def _traces(trace_file: Path, requests: int) -> list[dict[str, Any]]:
    """The traces written once `requests` requests were traced (log_frequency 1: one file each), each head
    record with its points [(name, ns)] sorted by time."""
    traces = wait_traces(trace_file, requests, WAIT)
    for trace in traces.values():
        trace["points"].sort(key=lambda point: point[1])
    return list(traces.values())


def _names(trace: dict[str, Any]) -> list[str]:
    return [name for name, _ in trace["points"]]


def test_decoupled_requests_are_traced_per_response(tmp_path: Path) -> None:
    trace_file = tmp_path / "trace.json"
    flags = [f"--trace-config=triton,file={trace_file}", "--trace-config=level=TIMESTAMPS", "--trace-config=rate=1",
             "--trace-config=log_frequency=1"]
    with RuntimeProcess([MODELS], flags) as proc:
        proc.wait_model_ready("stream_pipeline", WAIT)
        with Stream(proc.grpc_url) as stream:
            # responses sent after `execute` returned (DELAY), and the final one before it returns (WAIT): the
            # trace ends when both the call and the responses have
            stream.send("repeat_int32", repeat_inputs([4, 5, 6], delay_ms=20), "repeat", empty_final=True)
            assert [m.outputs["OUT"] for m in stream.until_final() if m.outputs] == [[4], [5], [6]]
            stream.send("repeat_int32", repeat_inputs([7], wait_ms=300), "late-return", empty_final=True)
            assert [m.outputs["OUT"] for m in stream.until_final() if m.outputs] == [[7]]
            stream.send("stream_pipeline", [tensor("TEXT", np.array([1, 2], np.int32), "INT32")], "pipeline",
                        empty_final=True)
            assert len([m for m in stream.until_final() if m.outputs]) == 2
        traces = _traces(trace_file, 3)
    for request_id, responses in (("repeat", 3), ("late-return", 1)):
        [repeat] = [t for t in traces if t["request_id"] == request_id]
        assert repeat["model_name"] == "repeat_int32" and "parent_id" not in repeat
        names = _names(repeat)
        assert names[:3] == ["REQUEST_START", "QUEUE_START", "COMPUTE_START"] and names[-1] == "REQUEST_END", names
        assert names.count("INFER_RESPONSE_COMPLETE") == responses and names.count("COMPUTE_END") == 1, names
    pipeline = {t["id"]: t for t in traces if t["request_id"] == "pipeline"}
    [parent] = [t for t in pipeline.values() if "parent_id" not in t]
    assert parent["model_name"] == "stream_pipeline"
    assert _names(parent).count("INFER_RESPONSE_COMPLETE") == 2
    steps = sorted(t["model_name"] for t in pipeline.values() if t.get("parent_id") == parent["id"])
    assert steps == ["repeat_int32", "stream_post", "stream_post", "stream_pre"]
    [decoupled_step] = [t for t in pipeline.values() if t["model_name"] == "repeat_int32"]
    assert _names(decoupled_step).count("INFER_RESPONSE_COMPLETE") == 2
    start, end = dict(parent["points"])["REQUEST_START"], dict(parent["points"])["REQUEST_END"]
    assert all(start <= ns <= end for t in pipeline.values() for _, ns in t["points"])
