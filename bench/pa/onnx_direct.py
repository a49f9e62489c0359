"""The baseline for the ONNX overhead figure: ONNX Runtime's `InferenceSession.run` called directly, serially,
in this process, on the model and input shape perf_analyzer sends (batch 1, random FP32 [1,16] inputs).

The session is built the way our onnxruntime backend builds it for that model's config (`ONNX_INSTANCES` > 1
instances: `intra_op_num_threads` 1, CPU provider). Run as a child process behind the server's `taskset`:

    taskset -c 0 python -m bench.pa.onnx_direct MODEL.onnx --seconds 2

prints one JSON object: p50/p99/mean microseconds per `run` and the number of calls timed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from bench.common import percentile
from bench.models import ONNX_INSTANCES


def session(path: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1 if ONNX_INSTANCES > 1 else 0  # as onnxruntime_backend.py's _session
    options.log_severity_level = 3
    return ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])


def measure(path: str, seconds: float, warmup: int = 500) -> dict[str, float]:
    sess = session(path)
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.random((1, 16), dtype=np.float32) for i in sess.get_inputs()}
    for _ in range(warmup):
        sess.run(None, feeds)
    samples: list[float] = []
    stop_at = time.perf_counter() + seconds
    while (t0 := time.perf_counter()) < stop_at:
        sess.run(None, feeds)
        samples.append((time.perf_counter() - t0) * 1e6)
    return {"p50_us": round(percentile(samples, 50), 2), "p99_us": round(percentile(samples, 99), 2),
            "mean_us": round(sum(samples) / len(samples), 2), "calls": len(samples)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("model", help="the .onnx file")
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.model, args.seconds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
