"""KServe v2 JSON tensors (`data` arrays in and out) against our runtime and the real Triton, side by side.

    python bench/json_tensors.py                                   # ours and Triton
    git worktree add /tmp/base HEAD~1                              # (with its _native built or copied in)
    python bench/json_tensors.py --ours base@/tmp/base/runtime= --ours new=

Both serve `ident`, a python model that answers its FP32 vector input as its output, from one repository. For
each size (elements of the vector) every server is sent the same prebuilt JSON body (`binary_data: false` for the
output too) `--count` times, one at a time over one kept-alive connection, alternating servers `--repeats`
times; the answer is read but not parsed, so the client's own JSON work is left out. Reported per server: p50
latency and **server CPU per request** (user + system time of the server's process tree from /proc, over the
requests), and the ratios to Triton. The binary form of the same tensors is measured beside them. Writes
bench/results/json_tensors.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import write_json  # noqa: E402
from bench.pa.cpu import tree_cpu_seconds  # noqa: E402
from bench.pa.servers import PinnedRuntime, choose_pinning, ours_configs  # noqa: E402
from bench.triton_peer import TritonPeer, require_install  # noqa: E402
from tests.support.server_process import ServerProcess  # noqa: E402

CONFIG = """
name: "ident"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(
            r, "INPUT0").as_numpy())]) for r in requests]
"""
SIZES = (16, 1_000, 10_000, 150_528)
JSON_LIMIT = 64 * 1024 * 1024


def repository(root: Path) -> Path:
    (root / "ident" / "1").mkdir(parents=True)
    (root / "ident" / "config.pbtxt").write_text(CONFIG)
    (root / "ident" / "1" / "model.py").write_text(MODEL)
    return root


def body(size: int, binary: bool) -> tuple[bytes, dict[str, str]]:
    values = np.random.default_rng(size).random(size, dtype=np.float32)
    tensor: dict[str, Any] = {"name": "INPUT0", "datatype": "FP32", "shape": [size]}
    if binary:
        tensor["parameters"] = {"binary_data_size": values.nbytes}
    else:
        tensor["data"] = values.tolist()
    head = json.dumps({"inputs": [tensor], "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": binary}}]})
    if not binary:
        return head.encode(), {"Content-Type": "application/json"}
    return head.encode() + values.tobytes(), {"Inference-Header-Content-Length": str(len(head))}


def measure(server: ServerProcess, payload: bytes, headers: dict[str, str], count: int) -> dict[str, float]:
    host, port = server.http_url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    try:
        for _ in range(2):  # warm-up
            conn.request("POST", "/v2/models/ident/infer", body=payload, headers=headers)
            answer = conn.getresponse()
            assert answer.status == 200, answer.read()[:200]
            answer.read()
        cpu = tree_cpu_seconds(server.pid)
        latencies = []
        for _ in range(count):
            start = time.perf_counter()
            conn.request("POST", "/v2/models/ident/infer", body=payload, headers=headers)
            answer = conn.getresponse()
            answer.read()
            latencies.append(time.perf_counter() - start)
        cpu = tree_cpu_seconds(server.pid) - cpu
    finally:
        conn.close()
    return {"p50_us": statistics.median(latencies) * 1e6, "cpu_us": cpu * 1e6 / count}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ours", action="append", default=[], metavar="NAME[@RUNTIME_DIR]=ARGS",
                        help="a configuration of ours, as bench/perf_analyzer.py takes it (repeatable; default ours=)")
    parser.add_argument("--size", type=int, action="append", help=f"vector sizes (default {SIZES})")
    parser.add_argument("--count", type=int, default=0, help="requests per run (default: by size)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-triton", dest="triton", action="store_false")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="json-tensors-") as tmp:
        repo = repository(Path(tmp))
        servers: dict[str, ServerProcess] = {}
        limits = [f"--http-max-json-bytes={JSON_LIMIT}", f"--http-max-body-bytes={JSON_LIMIT}"]
        for config in ours_configs(args.ours, limits):
            servers[config.name] = PinnedRuntime([repo], config, choose_pinning(False))
        if args.triton:
            servers["triton"] = TritonPeer([repo], install=require_install())
        for server in servers.values():
            server.start()
        results: dict[str, Any] = {}
        try:
            for server in servers.values():
                server.wait_model_ready("ident")
            for size in args.size or SIZES:
                count = args.count or max(5, min(300, 3_000_000 // (size * 10)))
                for binary in (False, True):
                    payload, headers = body(size, binary)
                    runs: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
                    for _ in range(args.repeats):
                        for name, server in servers.items():
                            runs[name].append(measure(server, payload, headers, count))
                    point = {name: {k: statistics.median(r[k] for r in rs) for k in ("p50_us", "cpu_us")}
                             for name, rs in runs.items()}
                    key = f"{size} {'binary' if binary else 'json'}"
                    results[key] = point
                    line = f"{key:>15}"
                    for name, figures in point.items():
                        line += f" | {name} p50 {figures['p50_us']:9.0f} us cpu {figures['cpu_us']:9.0f} us"
                        if "triton" in point and name != "triton":
                            line += (f" (/triton {figures['p50_us'] / point['triton']['p50_us']:.2f},"
                                     f" cpu {figures['cpu_us'] / point['triton']['cpu_us']:.2f})")
                    print(line, flush=True)
        finally:
            for server in servers.values():
                server.stop()
    print(f"wrote {write_json('json_tensors', results, args.json)}")


if __name__ == "__main__":
    main()
