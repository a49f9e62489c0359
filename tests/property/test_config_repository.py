"""A bad config.pbtxt in a repository leaves that model UNAVAILABLE with a reason; the others keep serving.

(A config.pbtxt that is not UTF-8 takes the whole server down today: test_findings.py.)
"""

from __future__ import annotations

import pytest

from tests.integration.runtime import repo
from tests.property import bad_configs
from tests.support.runtime_process import RuntimeProcess

BAD: dict[str, bytes] = {
    "cut_short": repo.ADD_SUB_CONFIG[:120].encode(),
    "wrong_kind": b'platform: "onnxruntime_onnx" max_batch_size: "eight"',
    "unknown_field": b'platform: "onnxruntime_onnx" max_batch: 8',
    "zero_dim": b'platform: "onnxruntime_onnx" input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [0] } ]',
    "overflow": b'platform: "onnxruntime_onnx" max_batch_size: 99999999999999999999',
    "deep_junk": b'platform: "onnxruntime_onnx" ' + b"optimization { " * 200,
    "name_mismatch": b'name: "other" platform: "onnxruntime_onnx"',
    "bad_escape": b'platform: "onnxruntime_onnx" name: "\\xff\\xfe"',
}


def test_bad_configs_leave_their_model_unavailable(tmp_path_factory: pytest.TempPathFactory) -> None:
    root = bad_configs.build(tmp_path_factory.mktemp("bad-configs"), BAD)
    with RuntimeProcess([root], ["--strict-readiness=false"]) as server:
        server.wait_model_ready("add_sub")
        bad_configs.assert_unavailable_and_serving(server, BAD)
