"""Version consistency for stateful models: a sequence that started on version 1 ends on version 1 while new
sequences start on version 2, and version 1 is unloaded only once its last sequence has ended."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from tests.support.runtime_process import RuntimeProcess

CONFIG = """
name: "seq_ver"
backend: "python"
max_batch_size: 4
version_policy: { latest: { num_versions: 1 } }
sequence_batching {
  max_sequence_idle_microseconds: 120000000
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "VERSION" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

MODEL = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.version = int(args["model_version"])

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            kept = pb_utils.get_input_tensor_by_name(request, "ACC_IN").as_numpy()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            total = np.where(start != 0, value, kept + value).astype(np.int32)
            version = np.full(total.shape, self.version, np.int32)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT", total), pb_utils.Tensor("ACC_OUT", total), pb_utils.Tensor("VERSION", version)
            ]))
        return responses
'''


def add_version(root: Path, version: int) -> None:
    (root / "seq_ver" / str(version)).mkdir(parents=True)
    (root / "seq_ver" / str(version) / "model.py").write_text(MODEL)


def send(client: grpcclient.InferenceServerClient, value: int, sequence_id: int, start: bool = False,
         end: bool = False) -> tuple[int, int]:
    tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.full((1, 1), value, np.int32))
    result = client.infer("seq_ver", [tensor], sequence_id=sequence_id, sequence_start=start, sequence_end=end)
    return int(result.as_numpy("OUTPUT")[0][0]), int(result.as_numpy("VERSION")[0][0])


def state_of(client: grpcclient.InferenceServerClient, version: str) -> str:
    index = client.get_model_repository_index(as_json=True).get("models", [])
    return next((m.get("state", "") for m in index if m["name"] == "seq_ver" and m.get("version") == version), "")


def wait_unloaded(client: grpcclient.InferenceServerClient, version: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if state_of(client, version) not in ("READY", "UNLOADING"):
            return
        time.sleep(0.05)  # polling a condition with a deadline, not synchronising on time
    raise AssertionError(f"seq_ver version {version} still loaded after {timeout} s")


def make_repo(tmp_path: Path, idle_us: int) -> Path:
    root = tmp_path / "repo"
    (root / "seq_ver").mkdir(parents=True)
    (root / "seq_ver" / "config.pbtxt").write_text(CONFIG.replace("120000000", str(idle_us)))
    add_version(root, 1)
    return root


def test_sequence_ends_on_the_version_it_started_on(tmp_path: Path) -> None:
    root = make_repo(tmp_path, 120_000_000)
    with RuntimeProcess([root], ["--model-control-mode=explicit", "--load-model=seq_ver"]) as proc:
        proc.wait_model_ready("seq_ver", timeout=120)
        with proc.grpc_client() as client:
            assert send(client, 1, 500, start=True) == (1, 1)  # sequence A on version 1
            add_version(root, 2)
            client.load_model("seq_ver")  # version 2 takes new traffic; version 1 drains
            assert send(client, 10, 600, start=True) == (10, 2)  # sequence B starts on version 2
            assert send(client, 2, 500) == (3, 1)  # A goes on on version 1, its state intact
            assert state_of(client, "1") == "UNLOADING"  # draining, still loaded for its live sequence
            assert send(client, 5, 600) == (15, 2)
            assert send(client, 3, 500, end=True) == (6, 1)  # A ends on version 1
            wait_unloaded(client, "1")  # ...which then goes
            assert send(client, 1, 600, end=True) == (16, 2)
            assert send(client, 7, 700, start=True, end=True) == (7, 2)
            shutil.rmtree(root / "seq_ver" / "1")


def test_idle_sequence_lets_the_old_version_go(tmp_path: Path) -> None:
    """A sequence that never sends END holds its version only until it is released for being idle (1 s)."""
    root = make_repo(tmp_path, 1_000_000)
    with RuntimeProcess([root], ["--model-control-mode=explicit", "--load-model=seq_ver"]) as proc:
        proc.wait_model_ready("seq_ver", timeout=120)
        with proc.grpc_client() as client:
            assert send(client, 1, 500, start=True) == (1, 1)
            add_version(root, 2)
            client.load_model("seq_ver")
            wait_unloaded(client, "1")  # no END: the idle release ends the hold
            error_text = ""
            try:
                send(client, 2, 500)
            except Exception as exc:  # the sequence is gone with its version
                error_text = str(exc)
            assert "must specify the START flag" in error_text
            assert send(client, 4, 500, start=True) == (4, 2)
