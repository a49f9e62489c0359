"""A steady load on a digit-classifying ensemble that records which version set answered each request.

    python -m ensemble_examples.load --url 10.96.0.12:8001 --model dual-classifier --seconds 40 \
        --digits held_out.npz

`--workers` threads send held-out digit pictures back to back for `--seconds`, each request on its own
(nothing is retried, so every failure counts). Every answer carries the runtime's `ensemble_versions`
parameter, the one set of step versions the whole request ran on. A line of progress every
`--report-every` seconds; at the end one line `SUMMARY {json}`: requests, failures (with a few messages),
answers per version set, and wrong answers (a class id outside 0..9 or a label that does not name it).
The demo runs it in a pod of the runtime image while it publishes a new model version.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from ensemble_examples import digits

VERSIONS_PARAMETER = "ensemble_versions"
SUMMARY_PREFIX = "SUMMARY "
PICTURES = 32  # distinct pictures cycled through


@dataclass
class Tally:
    """What the workers saw; guarded by `lock`."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: int = 0
    failed: int = 0
    wrong: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    version_sets: Counter[str] = field(default_factory=Counter)
    first_seen: dict[str, float] = field(default_factory=dict)

    def record(self, at: float, versions: str | None, error: str | None, wrong: bool) -> None:
        with self.lock:
            self.requests += 1
            if error is not None:
                self.failed += 1
                self.failures[error[:160]] += 1
                return
            key = versions or "(none reported)"
            self.version_sets[key] += 1
            self.first_seen.setdefault(key, at)
            self.wrong += wrong

    def summary(self, seconds: float) -> dict[str, Any]:
        with self.lock:
            return {
                "seconds": round(seconds, 1),
                "requests": self.requests,
                "failed": self.failed,
                "wrong": self.wrong,
                "failures": dict(self.failures.most_common(5)),
                "version_sets": dict(self.version_sets),
                "first_seen_s": {k: round(v, 2) for k, v in self.first_seen.items()},
            }


def pictures(held_out: digits.Digits, count: int = PICTURES) -> list[bytes]:
    """PNG pictures of the first `count` held-out digits, as a client would upload them."""
    return [digits.png(digits.grey(ink, 4)) for ink in held_out.ink[:count]]


def _one_request(client: Any, model: str, picture: bytes) -> tuple[str | None, bool]:
    """Send one picture; the version set that answered and whether the answer was malformed."""
    array = np.array([[picture]], dtype=np.object_)
    item = grpcclient.InferInput("image_bytes", [1, 1], "BYTES")
    item.set_data_from_numpy(array)
    result = client.infer(model, [item], client_timeout=10.0)
    parameters = result.get_response().parameters
    versions = parameters[VERSIONS_PARAMETER].string_param if VERSIONS_PARAMETER in parameters else None
    class_id = result.as_numpy("class_id")
    label = result.as_numpy("label")
    wrong = class_id is None or label is None or not 0 <= int(class_id.reshape(-1)[0]) <= 9
    if not wrong and label is not None and class_id is not None:
        wrong = label.reshape(-1)[0].decode() != str(int(class_id.reshape(-1)[0]))
    return versions, wrong


def _work(url: str, model: str, images: list[bytes], tally: Tally, began: float, stop: threading.Event, worker: int) -> None:
    with grpcclient.InferenceServerClient(url) as client:
        index = worker
        while not stop.is_set():
            picture = images[index % len(images)]
            index += 1
            try:
                versions, wrong = _one_request(client, model, picture)
            except InferenceServerException as exc:
                tally.record(time.monotonic() - began, None, f"{exc.status()}: {exc.message()}", False)
                continue
            tally.record(time.monotonic() - began, versions, None, wrong)


def run(url: str, model: str, images: list[bytes], seconds: float, workers: int, report_every: float, out: TextIO) -> dict[str, Any]:
    """Load `model` at `url` for `seconds`; print progress to `out`; return the summary."""
    tally = Tally()
    stop = threading.Event()
    began = time.monotonic()
    threads = [
        threading.Thread(target=_work, args=(url, model, images, tally, began, stop, w), daemon=True)
        for w in range(workers)
    ]
    for thread in threads:
        thread.start()
    deadline = began + seconds
    while not stop.wait(max(0.0, min(report_every, deadline - time.monotonic()))):
        now = time.monotonic()
        summary = tally.summary(now - began)
        sets = ", ".join(f"{k} x{v}" for k, v in sorted(summary["version_sets"].items()))
        print(f"t={now - began:5.1f}s requests={summary['requests']} failed={summary['failed']} [{sets}]", file=out, flush=True)
        if now >= deadline:
            stop.set()
    for thread in threads:
        thread.join(timeout=30.0)
    summary = tally.summary(time.monotonic() - began)
    print(SUMMARY_PREFIX + json.dumps(summary, sort_keys=True), file=out, flush=True)
    return summary


def parse_summary(log: str) -> dict[str, Any] | None:
    """The summary a `run` printed in `log` (a pod's log), or None if it never finished."""
    for line in reversed(log.splitlines()):
        if line.startswith(SUMMARY_PREFIX):
            found: dict[str, Any] = json.loads(line[len(SUMMARY_PREFIX):])
            return found
    return None


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    parser = argparse.ArgumentParser(prog="python -m ensemble_examples.load", description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True, help="gRPC endpoint host:port")
    parser.add_argument("--model", default="dual_classifier", help="ensemble taking image_bytes, giving class_id")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--report-every", type=float, default=5.0)
    parser.add_argument("--digits", type=Path, default=None, help="held-out digits (.npz from digits.save)")
    args = parser.parse_args(argv)
    held_out = digits.load(args.digits) if args.digits is not None else digits.split().held_out
    summary = run(args.url, args.model, pictures(held_out), args.seconds, args.workers, args.report_every, out)
    return 0 if summary["requests"] and not summary["failed"] and not summary["wrong"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
