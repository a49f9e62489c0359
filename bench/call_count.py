"""Python calls per request on the native front ends' path, per thread: a measure of the hot path's footprint.

    python bench/call_count.py                                      # this tree
    git worktree add /tmp/base HEAD~3
    python bench/call_count.py --tree base=/tmp/base/runtime --tree new=runtime

At concurrency 1 a request's Python runs cold (what ran between two requests evicted it from the caches: see
bench/README.md), so its cost follows how much code it runs more than how fast that code is when hot. This
counts it: one process per `--tree` builds the data plane in-process (the repository of bench/hotpath.py:
`add_one_0` a python model, `chain2` two of them in an ensemble, `add_sub` a small ONNX model), warms each model
up, then sends `--count` requests one at a time through `grpc_codec.decode_request` and
`DataPlane.infer_then` (where the core hands requests; `DataPlane.infer` when it does not take one) and counts,
with a profile hook on every thread, the Python functions called and the C functions called from Python, per
request and per thread (`MainThread` is the event loop, `py-*` a python model's instance thread). The decoding
stands in for the core's (`decode_view`), so about 20 of the loop's calls are not on the served path.
Prints the counts and the most frequent calls; writes bench/results/call_count.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` and `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import write_json
from bench.models import build_chain_repository, build_onnx_repository

WORKLOADS = ("add_one_0", "chain2", "add_sub")
REPO_ROOT = Path(__file__).resolve().parents[1]


def count_child(root: Path, model: str, count: int, top: int) -> dict[str, Any]:
    """In this process: calls per request of `count` requests for `model`, by thread and by function."""
    import uvloop
    from ensemble_runtime.server import build_dataplane, default_backends
    from ensemble_runtime.settings import parse_settings

    from bench.hotpath import infer_request, then_or_infer

    request = infer_request(model)
    calls: collections.Counter[tuple[str, str]] = collections.Counter()
    counting = [False]

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if not counting[0]:
            return
        thread = threading.current_thread().name
        if event == "call":
            code = frame.f_code
            calls[(thread, f"{Path(code.co_filename).name}:{code.co_name}")] += 1
        elif event == "c_call":
            calls[(thread, f"C:{getattr(arg, '__qualname__', arg)}")] += 1

    async def run() -> None:
        threading.setprofile(hook)  # before the model's threads start: they inherit it
        dataplane = build_dataplane(parse_settings([f"--model-repository={root}"]), default_backends())
        await dataplane.manager.load([model])
        one = then_or_infer(dataplane, request)
        for _ in range(300):  # an ONNX model runs inline once it has shown it is fast
            await one()
        sys.setprofile(hook)
        counting[0] = True
        for _ in range(count):
            await one()
        counting[0] = False
        sys.setprofile(None)
        threading.setprofile(None)
        await dataplane.manager.unload(model)

    uvloop.run(run())
    per_thread: collections.Counter[str] = collections.Counter()
    for (thread, _), n in calls.items():
        per_thread[thread] += n
    return {
        "calls_per_request": round(sum(calls.values()) / count, 1),
        "by_thread": {thread: round(n / count, 1) for thread, n in sorted(per_thread.items())},
        "top": [[thread, name, round(n / count, 2)] for (thread, name), n in calls.most_common(top)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=RUNTIME_DIR",
                        help="a source tree's runtime/ directory (repeatable; default: this one)")
    parser.add_argument("--workload", action="append", choices=WORKLOADS, help="default: all")
    parser.add_argument("--count", type=int, default=200, help="requests counted per workload")
    parser.add_argument("--top", type=int, default=12, help="most frequent calls shown")
    parser.add_argument("--json", type=Path, help="write here instead of bench/results/call_count.json")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        root, model, count, top = args.child
        print(json.dumps(count_child(Path(root), model, int(count), int(top))))
        return 0
    trees = [(name, Path(path).resolve()) for name, _, path in (t.partition("=") for t in args.tree)]
    trees = trees or [("this", REPO_ROOT / "runtime")]
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_chain_repository(root, lengths=(2,))
        build_onnx_repository(root)
        for model in args.workload or WORKLOADS:
            results[model] = {}
            for name, runtime_dir in trees:
                path = [str(REPO_ROOT / "contract"), str(runtime_dir), str(REPO_ROOT / "examples"), str(REPO_ROOT)]
                out = subprocess.run(
                    [sys.executable, __file__, "--child", str(root), model, str(args.count), str(args.top)],
                    env={**os.environ, "PYTHONPATH": os.pathsep.join(path)}, check=True, capture_output=True,
                    text=True,
                ).stdout
                row = results[model][name] = json.loads(out.strip().splitlines()[-1])
                threads = ", ".join(f"{t} {n}" for t, n in row["by_thread"].items())
                print(f"{model:<10} {name:<8} {row['calls_per_request']:>7} calls/request ({threads})")
                for thread, function, n in row["top"]:
                    print(f"{'':<20}{n:>7}  {thread:<14} {function}")
    print(f"wrote {write_json('call_count', results, args.json)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
