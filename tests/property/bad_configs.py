"""A repository of add_sub next to copies whose config.pbtxt is broken, and the check that serving goes on."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import grpc
from ensemble_examples import onnx_models

from tests.integration.runtime import repo
from tests.property import wire
from tests.property.good import assert_grpc_serves, assert_http_serves
from tests.support.runtime_process import RuntimeProcess


def build(root: Path, bad: Mapping[str, bytes]) -> Path:
    model = onnx_models.add_sub().SerializeToString()
    configs = {"add_sub": repo.ADD_SUB_CONFIG.encode(), **bad}
    for name, text in configs.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_bytes(text)
        (root / name / "1" / "model.onnx").write_bytes(model)
    return root


def assert_unavailable_and_serving(server: RuntimeProcess, bad: Mapping[str, bytes]) -> None:
    """Each bad model: UNAVAILABLE with a reason in the index, a clear error on infer; add_sub still serves."""
    status, _, raw = wire.http_post(server.http_port, "/v2/repository/index", b"{}", {})
    assert status == 200, raw
    index = {entry["name"]: entry for entry in json.loads(raw)}
    for name in bad:
        entry = index.get(name, {})
        assert entry.get("state") == "UNAVAILABLE" and entry.get("reason", "").strip(), (name, entry)
        answer = wire.http_answer(*wire.http_post(server.http_port, wire.infer_path(name), b'{"inputs":[]}', {}))
        assert answer.code in ("400", "404", "503") and answer.message, (name, answer)
    with grpc.insecure_channel(server.grpc_url) as channel:
        assert_grpc_serves(channel)
    assert_http_serves(server.http_port)
