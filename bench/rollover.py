"""Live version rollover from S3 under steady load: the acceptance scenario as a benchmark.

    PYTHONPATH=contract:runtime:examples:. python bench/rollover.py [--duration S] [--workers N]

Starts its own MinIO (tests/infra/minio.py) and an ensemble-runtime serving `s3://.../models/repo` in poll
mode (poll 1 s, settle 0.5 s). `--workers` closed-loop gRPC clients (threads, one client each) call the
`pipe` ensemble (step_a and step_b, the `versioned` ONNX model) for `--duration` seconds of steady load,
then through the acceptance scenario (tests/integration/rollover/scenario.py): version 2 of both steps with
`.complete` markers; version 3 without markers, step_b's model.onnx corrupt (step_a's good); version 1
deleted; step_b's version 3 corrected. Reported:

- failed requests and mixed responses (a_version != b_version, or disagreeing with `ensemble_versions`,
  or Y != X + version);
- p50/p99 latency during rollover (requests started between an upload and one poll interval after the
  runtime acted on it) divided by steady p50/p99 (requests before the first upload); target <= 2.0;
- seconds from upload to the first response from the new version set.

Prints a table and writes bench/results/rollover.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
for extra in (REPO_ROOT, REPO_ROOT / "runtime", REPO_ROOT / "examples"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from tests.infra.minio import MinioServer  # noqa: E402
from tests.integration.rollover.scenario import Event, Scenario  # noqa: E402
from tests.integration.rollover.support import (  # noqa: E402
    POLL_SECS,
    Load,
    Outcome,
    consistency_problems,
    repository_uri,
    serving,
    upload_pipeline,
)
from tests.integration.s3.helpers import BUCKET, S3Helper  # noqa: E402

RESULTS = REPO_ROOT / "bench" / "results" / "rollover.json"
TARGET_RATIO = 2.0


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def latency_ms(outcomes: list[Outcome]) -> dict[str, float]:
    ms = [o.latency * 1000 for o in outcomes if not o.error]
    if not ms:
        return {"requests": 0, "p50_ms": float("nan"), "p99_ms": float("nan")}
    return {"requests": len(ms), "p50_ms": round(percentile(ms, 50), 3), "p99_ms": round(percentile(ms, 99), 3)}


def run(duration: float, workers: int) -> dict[str, object]:
    with MinioServer() as minio, tempfile.TemporaryDirectory(prefix="rollover-bench-") as work:
        s3 = S3Helper(minio, minio.boto3_client())
        s3.client.create_bucket(Bucket=BUCKET)
        upload_pipeline(s3, [1])
        env = {**minio.client_env(), "AWS_EC2_METADATA_DISABLED": "true"}
        cache = Path(work) / "cache"
        with (
            serving(repository_uri(minio.endpoint_url), str(cache), env) as proc,
            Load(proc.grpc_url, workers=workers, deadline_s=duration + 300) as load,
        ):
            load.wait_for("{1, 1}", lambda o: o.versions == (1, 1), after=0.0)
            steady_from = time.monotonic()
            load.wait_progress(steady_from, per_worker=1, timeout=duration + 30)
            time.sleep(max(0.0, duration - (time.monotonic() - steady_from)))  # steady load, measured
            scenario = Scenario(s3, proc, load, cache, serve_timeout=60.0)
            scenario.roll_v2_with_markers()
            scenario.upload_corrupt_v3(with_step_a=True)
            scenario.remove_v1()
            scenario.fix_v3(with_step_a=False)
            outcomes = load.stop()
    return summarize(outcomes, scenario.events, steady_from, duration, workers)


def summarize(
    outcomes: list[Outcome], events: list[Event], steady_from: float, duration: float, workers: int
) -> dict[str, object]:
    first_upload = min(e.uploaded for e in events)
    windows = [(e.uploaded, e.settled + POLL_SECS) for e in events]
    steady = [o for o in outcomes if steady_from <= o.started < first_upload]
    rolling = [o for o in outcomes if any(lo <= o.started <= hi for lo, hi in windows)]
    problems = consistency_problems(outcomes)
    steady_ms, rolling_ms = latency_ms(steady), latency_ms(rolling)
    p50_ratio = rolling_ms["p50_ms"] / steady_ms["p50_ms"]
    p99_ratio = rolling_ms["p99_ms"] / steady_ms["p99_ms"]
    return {
        "config": {
            "duration_s": duration,
            "workers": workers,
            "poll_secs": POLL_SECS,
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        },
        "requests": len(outcomes),
        "failed": len(problems["failed"]),
        "mixed": len(problems["mixed"]) + len(problems["misreported"]) + len(problems["wrong_values"]),
        "mixed_sets": sorted({",".join(map(str, o.versions)) for o in problems["mixed"]}),
        "steady": steady_ms,
        "rollover": rolling_ms,
        "p50_ratio": round(p50_ratio, 3),
        "p99_ratio": round(p99_ratio, 3),
        "target_ratio": TARGET_RATIO,
        "events": [
            {
                "event": e.name,
                "seconds_to_serve": None if e.seconds_to_serve is None else round(e.seconds_to_serve, 3),
                "seconds_to_settle": round(e.settled - e.uploaded, 3),
            }
            for e in events
        ],
    }


def print_table(result: dict[str, object]) -> None:
    steady, rolling = result["steady"], result["rollover"]
    assert isinstance(steady, dict) and isinstance(rolling, dict)
    print(f"{'':24}{'requests':>10}{'p50 ms':>10}{'p99 ms':>10}")
    for label, row in (("steady", steady), ("during rollover", rolling)):
        print(f"{label:24}{row['requests']:>10}{row['p50_ms']:>10.2f}{row['p99_ms']:>10.2f}")
    for key in ("p50_ratio", "p99_ratio"):
        ratio = float(str(result[key]))
        print(f"{key:24}{ratio:>10.2f}  {'MET' if ratio <= TARGET_RATIO else 'MISS'} (target <= {TARGET_RATIO})")
    print(f"{'requests':24}{result['requests']:>10}")
    print(f"{'failed':24}{result['failed']:>10}")
    print(f"{'mixed':24}{result['mixed']:>10}  {result['mixed_sets'] or ''}")
    events = result["events"]
    assert isinstance(events, list)
    for event in events:
        serve = event["seconds_to_serve"]
        shown = (
            f"serves after {serve:.2f}s" if serve is not None else f"handled after {event['seconds_to_settle']:.2f}s"
        )
        print(f"  {event['event']:34}{shown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of steady load before the rollover")
    parser.add_argument("--workers", type=int, default=8, help="concurrent client streams")
    args = parser.parse_args()
    result = run(args.duration, args.workers)
    print_table(result)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
