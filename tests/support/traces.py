"""Reading the trace files Triton's trace extension writes (ours and tritonserver's: the same JSON shape)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def read_traces(files: Iterable[Path]) -> dict[int, dict[str, Any]]:
    """Trace id -> its head record (model_name, model_version, request_id, parent_id) with `points`: the
    [(name, ns)] of its records, in the order written."""
    traces: dict[int, dict[str, Any]] = {}
    for path in files:
        for record in json.loads(path.read_text()):
            if "timestamps" in record:
                traces[record["id"]]["points"] += [(t["name"], t["ns"]) for t in record["timestamps"]]
            else:
                traces[record["id"]] = {**record, "points": []}
    return traces


def wait_traces(trace_file: Path, files: int, timeout: float) -> dict[int, dict[str, Any]]:
    """`read_traces` of `trace_file.<k>` once `files` of them are there and whole: a server may still be writing
    the last (ours writes each whole under another name, then renames it; tritonserver writes in place)."""
    deadline = time.monotonic() + timeout
    while True:
        found = sorted(trace_file.parent.glob(trace_file.name + ".*"), key=lambda p: int(p.suffix[1:]))
        if len(found) >= files:
            try:
                return read_traces(found)
            except json.JSONDecodeError:
                pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(found)} whole trace files of {files} after {timeout} s: {found}")
        time.sleep(0.05)
