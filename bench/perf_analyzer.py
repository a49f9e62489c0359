"""NVIDIA's perf_analyzer against our runtime and the real Triton, side by side, on the same repository.

`add_one_0` (a `simple`-like python model: FP32 [16] in, +1 out) and `chain2` (a 2-step python ensemble of
them) from bench/models, over gRPC, at concurrency 1 and 16, perf_analyzer without `-x` (so it reads both
servers' statistics, the composing models' too). The two servers run side by side and are measured in
alternation, `--repeats` pairs per point; the medians and the ratios ours/Triton (throughput: higher is better
for ours above 1; p50: lower is better for ours below 1) are printed and written to
bench/results/perf_analyzer.json. perf_analyzer comes from tools/setup-perf-analyzer.sh (PERF_ANALYZER
overrides the path), the peer from tools/setup-triton.sh.

    python bench/perf_analyzer.py [--interval-ms 2000] [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import write_json
from bench.models import build_chain_repository

REPO_ROOT = Path(__file__).resolve().parents[1]
SETUP_SCRIPT = REPO_ROOT / "tools" / "setup-perf-analyzer.sh"
MODELS = ("add_one_0", "chain2")
CONCURRENCY = (1, 16)


class PerfAnalyzerNotInstalled(RuntimeError):
    """tools/setup-perf-analyzer.sh has not been run (or PERF_ANALYZER names no file)."""


def find_perf_analyzer() -> Path | None:
    """The perf_analyzer wrapper that tools/setup-perf-analyzer.sh installed, or None."""
    override = os.environ.get("PERF_ANALYZER")
    if override:
        return Path(override) if Path(override).is_file() else None
    try:
        printed = subprocess.run(["bash", str(SETUP_SCRIPT), "--print-path"], capture_output=True, text=True,
                                 check=True).stdout.strip()
    except (subprocess.CalledProcessError, OSError):
        return None
    path = Path(printed)
    return path if path.is_file() else None


def not_installed_reason() -> str | None:
    """A skip reason when perf_analyzer is missing, else None (for `pytest.mark.skipif`)."""
    if find_perf_analyzer() is None:
        return "perf_analyzer is not installed: run tools/setup-perf-analyzer.sh (or make tools)"
    return None


@dataclass(frozen=True)
class Measurement:
    """One perf_analyzer run: exit code, its output, and the CSV row it wrote (empty when it failed)."""

    command: list[str]
    returncode: int
    output: str
    row: dict[str, str]

    @property
    def throughput(self) -> float:
        return float(self.row["Inferences/Second"])

    @property
    def p50_us(self) -> float:
        return float(self.row["p50 latency"])


def run_perf_analyzer(binary: Path, model: str, url: str, args: Sequence[str], timeout: float = 120.0) -> Measurement:
    """Run perf_analyzer once for `model` at `url` with `args` (protocol, mode, windows, concurrency)."""
    with tempfile.TemporaryDirectory(prefix="perf-analyzer-") as tmp:
        report = Path(tmp) / "report.csv"
        command = [str(binary), "-m", model, "-u", url, *args, "-f", str(report)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=tmp)
            code, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as exc:
            code, output = -1, f"timed out after {timeout}s: {exc.stdout!r} {exc.stderr!r}"
        rows = list(csv.DictReader(io.StringIO(report.read_text()))) if report.is_file() else []
    return Measurement(command, code, output, rows[0] if rows and code == 0 else {})


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 1) if values else float("nan")


def measure(binary: Path, urls: dict[str, str], interval_ms: int, repeats: int) -> dict[str, Any]:
    """model -> concurrency -> server -> medians (and the runs), alternating the servers run by run."""
    results: dict[str, Any] = {}
    for model in MODELS:
        for concurrency in CONCURRENCY:
            args = ["-i", "grpc", "--concurrency-range", str(concurrency), "--measurement-interval",
                    str(interval_ms), "-s", "25", "--max-trials", "10"]
            runs: dict[str, list[Measurement]] = {server: [] for server in urls}
            for _ in range(repeats):
                for server, url in urls.items():
                    runs[server].append(run_perf_analyzer(binary, model, url, args))
            point: dict[str, Any] = {}
            for server, measured in runs.items():
                good = [m for m in measured if m.returncode == 0]
                point[server] = {
                    "throughput_rps": _median([m.throughput for m in good]),
                    "p50_us": _median([m.p50_us for m in good]),
                    "runs_ok": len(good), "runs": len(measured),
                    "errors": [m.output.strip().splitlines()[-1:] for m in measured if m.returncode != 0],
                }
            ours, triton = point["ours"], point["triton"]
            both = ours["runs_ok"] > 0 and triton["runs_ok"] > 0
            point["ratio"] = {
                "throughput": round(ours["throughput_rps"] / triton["throughput_rps"], 2) if both else None,
                "p50": round(ours["p50_us"] / triton["p50_us"], 2) if both else None,
            }
            point["command"] = shlex.join(["perf_analyzer", "-m", model, "-u", "<server>:<grpc port>", *args])
            results.setdefault(model, {})[str(concurrency)] = point
            print(f"{model:<10} c={concurrency:<3} ours {ours['throughput_rps']:>8} infer/s p50 {ours['p50_us']:>7} us | "
                  f"triton {triton['throughput_rps']:>8} infer/s p50 {triton['p50_us']:>7} us | "
                  f"ratio thr {point['ratio']['throughput']} p50 {point['ratio']['p50']}", flush=True)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    from bench.triton_peer import TritonPeer, require_install
    from tests.support.runtime_process import RuntimeProcess

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--interval-ms", type=int, default=2000, help="perf_analyzer measurement window (2000)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating ours/Triton runs per point (3)")
    parser.add_argument("--quick", action="store_true", help="1 s windows, one run per point (a smoke run)")
    args = parser.parse_args(argv)
    interval_ms, repeats = (1000, 1) if args.quick else (args.interval_ms, args.repeats)
    binary = find_perf_analyzer()
    if binary is None:
        raise PerfAnalyzerNotInstalled(not_installed_reason())
    install = require_install()
    with tempfile.TemporaryDirectory(prefix="perf-analyzer-bench-") as tmp:
        repository = Path(tmp) / "models"
        build_chain_repository(repository, lengths=(2,))
        with RuntimeProcess([repository]) as ours, TritonPeer([repository], install=install) as triton:
            ours.wait_ready(120)
            triton.wait_ready(120)
            shown = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
            version = (shown.stdout + shown.stderr).strip()
            results = measure(binary, {"ours": ours.grpc_url, "triton": triton.grpc_url}, interval_ms, repeats)
    report = {
        "python": sys.version.split()[0], "machine": platform.machine(), "cpus": os.cpu_count(),
        "perf_analyzer": version, "triton": {"pytriton": install.pytriton_version},
        "interval_ms": interval_ms, "repeats": repeats, "protocol": "grpc", "results": results,
    }
    print(f"wrote {write_json('perf_analyzer', report)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
