"""A small repository for the repository-control tests, and a file outside it that must never run."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

IDENTITY_CONFIG = """
name: "good"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""

IDENTITY_MODEL = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
                for r in requests]
'''

# Imported as a model, this file leaves a marker next to itself: the proof that it ran.
EVIL_MODEL = '''
from pathlib import Path

Path(__file__).with_name("MARKER").write_text("ran")


class TritonPythonModel:
    def execute(self, requests):
        return []
'''


@dataclass(frozen=True)
class Layout:
    root: Path  # the model repository
    evil: Path  # outside the repository
    marker: Path  # written if `evil` ever runs

    @property
    def good_config(self) -> dict[str, object]:
        return {
            "name": "good", "backend": "python", "max_batch_size": 0,
            "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [2]}],
            "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [2]}],
        }

    def override(self, **fields: object) -> str:
        return json.dumps({**self.good_config, **fields})


def build(base: Path) -> Layout:
    """<base>/repo/good/1/{model.py, link.py -> <base>/outside/evil.py}, <base>/outside/evil.py."""
    outside = base / "outside"
    outside.mkdir(parents=True)
    evil = outside / "evil.py"
    evil.write_text(EVIL_MODEL)
    root = base / "repo"
    version = root / "good" / "1"
    version.mkdir(parents=True)
    (root / "good" / "config.pbtxt").write_text(IDENTITY_CONFIG)
    (version / "model.py").write_text(IDENTITY_MODEL)
    (version / "link.py").symlink_to(evil)
    (root / "good" / "warmup").symlink_to(outside, target_is_directory=True)
    return Layout(root=root, evil=evil, marker=outside / "MARKER")


def x_input() -> list[grpcclient.InferInput]:
    item = grpcclient.InferInput("X", [2], "FP32")
    item.set_data_from_numpy(np.array([1.5, -2.0], np.float32))
    return [item]


def assert_serves(grpc_url: str) -> None:
    """The server still answers a good inference request."""
    with grpcclient.InferenceServerClient(grpc_url) as client:
        out = client.infer("good", x_input()).as_numpy("Y")
    np.testing.assert_array_equal(out, np.array([1.5, -2.0], np.float32))


def http(url: str, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """(status, body) of one raw HTTP request, error statuses included."""
    request = urllib.request.Request(f"http://{url}{path}", data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def load_body(config: str | None = None) -> bytes:
    return json.dumps({"parameters": {"config": config}} if config else {}).encode()
