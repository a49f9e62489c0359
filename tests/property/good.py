"""One known-good request per transport: after every example the server must still answer it correctly."""

from __future__ import annotations

import grpc
import numpy as np

from tests.property import wire
from tests.property.invariant import assert_holds
from tests.property.plans import InputPlan, Plan


def good_plan() -> Plan:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    return Plan("add_sub", "", (InputPlan("INPUT0", "FP32", (1, 16), a), InputPlan("INPUT1", "FP32", (1, 16), a * 2)))


def assert_grpc_serves(channel: grpc.Channel) -> None:
    plan = good_plan()
    assert_holds(plan, wire.grpc_call(channel, wire.grpc_request(plan).SerializeToString()))


def assert_http_serves(port: int) -> None:
    plan = good_plan()
    body, length = wire.http_body(plan)
    headers = {} if length is None else {"Inference-Header-Content-Length": str(length)}
    assert_holds(plan, wire.http_answer(*wire.http_post(port, wire.infer_path(plan.model), body, headers)))
