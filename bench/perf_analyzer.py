"""NVIDIA's perf_analyzer against our runtime (one or more configurations) and the real Triton, side by side.

Workloads from bench/models: `add_one_0` (a `simple`-like python model: FP32 [16] in, +1 out) and `chain2` (a
2-step python ensemble of it), and on request (`--model`) `add_one_x2` (add_one with two instances) and
`add_one_stream` (add_one, decoupled: one response, then the final flag; gRPC with `--streaming` only), over
gRPC and HTTP, at concurrency 1 and 16, perf_analyzer in its default sync mode without `-x` (so it reads the
servers' statistics, the composing models' too); and `add_sub`, a small ONNX model, on ours only (the peer has
no ONNX Runtime backend) at concurrency 1, against ONNX Runtime's `InferenceSession.run` called directly in a
process pinned like the server: the p50 difference is our overhead. With `--floor`, the gRPC points (the ONNX one
too) also measure `bench.pa.floor`: the native core echoing each request from one loop wake-up, with no data
plane and no model, the least any request to our runtime takes on this machine. With `--floor-lane` the ONNX
point also measures `bench.pa.floor --onnx-lane`: the same model run and answered in the native core's ONNX lane,
with no Python per request (what the lane gives once the runtime serves ONNX models on it). With `--inline` the python
models carry our `EXECUTE_INLINE` parameter (their `execute` on our event loop; Triton ignores it). With
`--streaming` every python workload goes over ModelStreamInfer (gRPC only, one stream per perf_analyzer context).

All servers run for the whole benchmark on the same repository and are measured in alternation, `--repeats`
runs per point. With `--pin` (the default with 2 or more CPUs) every server runs on the first CPU and
perf_analyzer on the second (`taskset`; Triton's python stubs inherit it). Around each run the server's process
tree's CPU time (utime + stime from /proc) and its own success count for the model are read: CPU ms per 1,000
requests is their ratio (perf_analyzer's request count covers only its last windows, not its warm-up and
unstable trials, so it is not used as the divisor). Medians and ratios ours/Triton are printed and written to
bench/results/perf_analyzer.json. perf_analyzer comes from tools/setup-perf-analyzer.sh (PERF_ANALYZER
overrides the path), the peer from tools/setup-triton.sh.

    python bench/perf_analyzer.py [--repeats 3] [--interval-ms 2000] [--quick]
    python bench/perf_analyzer.py --ours grpcio=--grpc-frontend=grpcio --ours native=   # two of ours + Triton
    python bench/perf_analyzer.py --protocol http --ours aiohttp=--http-frontend=aiohttp --ours native=
    python bench/perf_analyzer.py --ours base@/tmp/base/runtime= --ours new=      # two trees (a worktree)
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import write_json
from bench.models import (
    ONNX_MODEL,
    build_add_one,
    build_chain_repository,
    build_onnx_repository,
    mark_cached,
    mark_inline,
)
from bench.pa import report, threads
from bench.pa.cpu import tree_cpu_seconds
from bench.pa.report import FLOOR, FLOOR_IN_CORE, FLOOR_LANE, FLOORS, TRITON
from bench.pa.servers import Pinning, choose_pinning, ours_configs, server_url
from tests.support.server_process import ServerProcess

REPO_ROOT = Path(__file__).resolve().parents[1]
SETUP_SCRIPT = REPO_ROOT / "tools" / "setup-perf-analyzer.sh"
MULTI_INSTANCE = "add_one_x2"  # add_one with two instances (one queue for both in ours)
DECOUPLED = "add_one_stream"  # add_one, decoupled: over gRPC streaming only (HTTP cannot carry it)
MODELS = ("add_one_0", "chain2", MULTI_INSTANCE, DECOUPLED)
DEFAULT_MODELS = MODELS[:2]
PROTOCOLS = ("grpc", "http")
CONCURRENCY = (1, 16)
CACHE_CONFIG = "--cache-config=local,size=67108864"  # --cache: 64 MiB of responses, in both servers
ONNX_CONCURRENCY = 1

Run = dict[str, Any]


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

    @property
    def p99_us(self) -> float:
        return float(self.row["p99 latency"])


def run_perf_analyzer(binary: Path, model: str, url: str, args: Sequence[str], timeout: float = 120.0,
                      prefix: Sequence[str] = ()) -> Measurement:
    """Run perf_analyzer once for `model` at `url` with `args` (protocol, mode, windows, concurrency), behind
    `prefix` (e.g. `taskset -c 1`)."""
    with tempfile.TemporaryDirectory(prefix="perf-analyzer-") as tmp:
        report_csv = Path(tmp) / "report.csv"
        command = [*prefix, str(binary), "-m", model, "-u", url, *args, "-f", str(report_csv)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=tmp)
            code, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as exc:
            code, output = -1, f"timed out after {timeout}s: {exc.stdout!r} {exc.stderr!r}"
        rows = list(csv.DictReader(io.StringIO(report_csv.read_text()))) if report_csv.is_file() else []
    return Measurement(command, code, output, rows[0] if rows and code == 0 else {})


class Bench:
    """The servers (name -> process, all running), perf_analyzer, and how each run is made."""

    def __init__(self, binary: Path, servers: Mapping[str, ServerProcess], pinning: Pinning, interval_ms: int,
                 repeats: int, stability: int, per_thread: bool = False, streaming: bool = False,
                 tls_root: Path | None = None) -> None:
        self.binary, self.servers, self.pinning = binary, servers, pinning
        self.interval_ms, self.repeats, self.stability = interval_ms, repeats, stability
        self.per_thread = per_thread  # also sample each thread of our servers (bench.pa.threads)
        self.streaming = streaming  # every model over ModelStreamInfer (the decoupled one always is)
        self.tls_root = tls_root  # gRPC over TLS: the root the servers' certificate chains to

    def streams(self, model: str) -> bool:
        """Whether `model`'s requests go over ModelStreamInfer (perf_analyzer's --streaming, gRPC only)."""
        return self.streaming or model == DECOUPLED

    def args(self, protocol: str, concurrency: int, streaming: bool = False) -> list[str]:
        tls = ["--ssl-grpc-use-ssl", "true", "--ssl-grpc-root-certifications-file", str(self.tls_root)] \
            if self.tls_root is not None and protocol == "grpc" else []
        return ["-i", protocol, *tls, *(["--streaming"] if streaming else []), "--concurrency-range", str(concurrency),
                "--measurement-interval", str(self.interval_ms), "-s", str(self.stability), "--max-trials", "10"]

    def success_count(self, name: str, model: str) -> int:
        with self.servers[name].grpc_client() as client:
            stats = client.get_inference_statistics(model)
        return sum(int(m.inference_stats.success.count) for m in stats.model_stats if m.name == model)

    def run(self, name: str, model: str, protocol: str, concurrency: int) -> Run:
        server = self.servers[name]
        sampled = self.per_thread and name != TRITON
        requests, cpu = self.success_count(name, model), tree_cpu_seconds(server.pid)
        before = threads.sample(server.pid) if sampled else {}
        measured = run_perf_analyzer(self.binary, model, server_url(server, protocol),
                                     self.args(protocol, concurrency, self.streams(model)),
                                     prefix=self.pinning.client_prefix())
        after = threads.sample(server.pid) if sampled else {}
        cpu, requests = tree_cpu_seconds(server.pid) - cpu, self.success_count(name, model) - requests
        ok = measured.returncode == 0 and requests > 0
        per_thread = {"threads": threads.per_request(server.pid, before, after, requests)} if sampled else {}
        return {**per_thread,
            "ok": ok, "server_requests": requests, "server_cpu_s": round(cpu, 3),
            "throughput_rps": measured.throughput if ok else None, "p50_us": measured.p50_us if ok else None,
            "p99_us": measured.p99_us if ok else None,
            "cpu_ms_per_1000": round(cpu * 1e6 / requests, 1) if requests > 0 else None,
            "error": "" if ok else " ".join(measured.output.strip().splitlines()[-1:]),
        }

    def alternate(self, runners: Mapping[str, Callable[[], Run]]) -> dict[str, list[Run]]:
        """`repeats` rounds, each calling every runner once, in turn."""
        runs: dict[str, list[Run]] = {name: [] for name in runners}
        for _ in range(self.repeats):
            for name, runner in runners.items():
                runs[name].append(runner())
        return runs

    def point(self, names: Sequence[str], model: str, protocol: str, concurrency: int) -> dict[str, Any]:
        runs = self.alternate({n: partial(self.run, n, model, protocol, concurrency) for n in names})
        point: dict[str, Any] = {name: {**report.summarize(r), "samples": r} for name, r in runs.items()}
        if TRITON in names:
            point["ratio"] = report.ratios(point, [n for n in names if n != TRITON], TRITON)
        point["command"] = shlex.join([*self.pinning.client_prefix(), "perf_analyzer", "-m", model, "-u",
                                       f"<server>:<{protocol} port>",
                                       *self.args(protocol, concurrency, self.streams(model))])
        return point

    def onnx_direct(self, model_path: Path, seconds: float) -> Run:
        """ONNX Runtime's `run` on the model, directly, in a child process pinned like the servers."""
        command = [*self.pinning.server_prefix(), sys.executable, "-m", "bench.pa.onnx_direct", str(model_path),
                   "--seconds", str(seconds)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=120)
        if done.returncode != 0:
            return {"ok": False, "error": (done.stdout + done.stderr).strip()[-500:]}
        return {"ok": True, "error": "", **json.loads(done.stdout.strip().splitlines()[-1])}

    def onnx_point(self, ours: Sequence[str], protocol: str, model_path: Path, seconds: float) -> dict[str, Any]:
        """Ours at concurrency 1 on the ONNX model, alternating with ONNX Runtime called directly (and the floor,
        over gRPC, where it runs: its answer runs no model, so its `overhead` is the front end's alone)."""
        measured = [*ours, *(n for n in FLOORS if protocol == "grpc" and n in self.servers)]
        runners: dict[str, Callable[[], Run]] = {"onnxruntime": partial(self.onnx_direct, model_path, seconds)}
        runners.update({n: partial(self.run, n, ONNX_MODEL, protocol, ONNX_CONCURRENCY) for n in measured})
        runs = self.alternate(runners)
        direct = [r for r in runs.pop("onnxruntime") if r["ok"]]
        point: dict[str, Any] = {name: {**report.summarize(r), "samples": r} for name, r in runs.items()}
        point["onnxruntime"] = {"p50_us": report.median([r["p50_us"] for r in direct]),
                                "p99_us": report.median([r["p99_us"] for r in direct]), "runs_ok": len(direct)}
        point["overhead_us"] = {n: round(point[n]["p50_us"] - point["onnxruntime"]["p50_us"], 1) for n in measured}
        point["command"] = shlex.join([*self.pinning.client_prefix(), "perf_analyzer", "-m", ONNX_MODEL, "-u",
                                       f"<server>:<{protocol} port>", *self.args(protocol, ONNX_CONCURRENCY)])
        return point


def print_threads(point: Mapping[str, Any], names: Sequence[str]) -> None:
    """Each server's threads in the point's last run, where they were sampled (`--threads`)."""
    for name in names:
        samples = point[name]["samples"]
        sampled = samples[-1].get("threads") if samples else None
        if sampled:
            print("\n".join(threads.lines(name, sampled)), flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--interval-ms", type=int, help="perf_analyzer measurement window (2000; 1000 with --quick)")
    parser.add_argument("--repeats", type=int, help="alternating runs per point and server (3; 1 with --quick)")
    parser.add_argument("--quick", action="store_true", help="1 s windows, one run per point (a smoke run)")
    parser.add_argument("--stability", type=int, default=25,
                        help="perf_analyzer's -s: how far its last 3 windows may differ, in percent (25)")
    parser.add_argument("--model", action="append", choices=MODELS, help="python workloads (default: add_one_0 and chain2)")
    parser.add_argument("--protocol", action="append", choices=PROTOCOLS, help="default: grpc and http")
    parser.add_argument("--concurrency", action="append", type=int, help="default: 1 and 16")
    parser.add_argument("--ours", action="append", default=[], metavar="NAME[@RUNTIME_DIR]=ARGS",
                        help="a configuration of our runtime, ARGS its extra arguments, RUNTIME_DIR another tree's "
                             "runtime/ (repeatable; default ours=)")
    parser.add_argument("--ours-arg", action="append", default=[], metavar="ARG",
                        help="an extra runtime argument for every configuration of ours (repeatable)")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=None,
                        help="servers on the first CPU, perf_analyzer on the second (default: with >= 2 CPUs)")
    parser.add_argument("--triton", action=argparse.BooleanOptionalAction, default=True, help="the peer (on)")
    parser.add_argument("--triton-batch", action="store_true",
                        help="run the peer under SCHED_BATCH (chrt --batch 0), as ours with --thread-policy=batch")
    parser.add_argument("--floor", action="store_true",
                        help="also measure bench.pa.floor (the native core and one loop wake-up, nothing else) over gRPC")
    parser.add_argument("--floor-in-core", action="store_true",
                        help="also measure bench.pa.floor --in-core (the native core answering ModelInfer itself: "
                             "no Python per request) over gRPC")
    parser.add_argument("--floor-lane", action="store_true",
                        help="also measure bench.pa.floor --onnx-lane at the ONNX point: the ONNX model run and "
                             "answered in the native core's lane, no Python per request (gRPC)")
    parser.add_argument("--floor-threads", type=int, default=1,
                        help="the floor core's threads (0: driven by the event loop's thread, as "
                             "--grpc-native-threads=0)")
    parser.add_argument("--onnx", action=argparse.BooleanOptionalAction, default=True,
                        help="the ONNX overhead point (on)")
    parser.add_argument("--neighbor", action="store_true",
                        help="a busy process on the servers' CPU while they are measured (a core shared with another "
                             "workload; needs --pin)")
    parser.add_argument("--cache", action="store_true",
                        help="Triton's response cache on every python model and ensemble, in both servers "
                             f"({CACHE_CONFIG}); perf_analyzer sends the same data every time, so all but the "
                             "first requests of a run are hits")
    parser.add_argument("--inline", action="store_true",
                        help="the python models with EXECUTE_INLINE (ours runs their execute on the loop; Triton "
                             "ignores the parameter)")
    parser.add_argument("--streaming", action="store_true",
                        help="every python workload over gRPC streaming (perf_analyzer --streaming; no HTTP, no floor)")
    parser.add_argument("--tls", action="store_true",
                        help="the gRPC port of every server over TLS (--grpc-use-ssl with a certificate made for the "
                             "run; perf_analyzer's --ssl-grpc-*); no floors")
    parser.add_argument("--threads", action="store_true",
                        help="per thread of ours: CPU and context switches per request (bench.pa.threads)")
    parser.add_argument("--json", type=Path, help="write here instead of bench/results/perf_analyzer.json")
    args = parser.parse_args(argv)
    args.interval_ms = args.interval_ms or (1000 if args.quick else 2000)
    args.repeats = args.repeats or (1 if args.quick else 3)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    from bench.pa.servers import FloorServer, PinnedRuntime, PinnedTriton, busy_neighbor, tls_setup
    from bench.triton_peer import require_install

    args = parse_args(argv)
    binary = find_perf_analyzer()
    if binary is None:
        raise PerfAnalyzerNotInstalled(not_installed_reason())
    install = require_install() if args.triton else None
    pinning = choose_pinning(args.pin)
    if args.neighbor and not pinning.server:
        raise SystemExit("--neighbor needs the servers pinned (--pin, 2 or more CPUs)")
    if args.floor_lane and not args.onnx:
        raise SystemExit("--floor-lane measures the ONNX point: not with --no-onnx")
    if args.tls and (args.floor or args.floor_in_core or args.floor_lane):
        raise SystemExit("--tls: the floors serve plaintext only")
    models, protocols = args.model or list(DEFAULT_MODELS), args.protocol or list(PROTOCOLS)
    levels = args.concurrency or list(CONCURRENCY)
    load_before, started = os.getloadavg(), time.monotonic()
    results: dict[str, Any] = {}
    onnx: dict[str, Any] = {}
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="perf-analyzer-bench-")))
        client_tls, tls_flags = tls_setup(tmp / "pki") if args.tls else (None, [])
        configs = ours_configs(args.ours, [*args.ours_arg, *([CACHE_CONFIG] if args.cache else []), *tls_flags])

        def serving(server: ServerProcess) -> ServerProcess:
            server.client_tls = client_tls  # the harness's own calls (readiness, statistics) over TLS too
            return stack.enter_context(server)

        build_chain_repository(tmp / "models", lengths=(2,))
        if MULTI_INSTANCE in models:
            build_add_one(tmp / "models", MULTI_INSTANCE, instances=2)
        if DECOUPLED in models:
            build_add_one(tmp / "models", DECOUPLED, decoupled=True)
        if args.inline:
            mark_inline(tmp / "models")
        if args.cache:
            mark_cached(tmp / "models")
        model_path = build_onnx_repository(tmp / "onnx") if args.onnx else None
        ours_repos = [tmp / "models", *([tmp / "onnx"] if args.onnx else [])]
        servers: dict[str, ServerProcess] = {c.name: serving(PinnedRuntime(ours_repos, c, pinning)) for c in configs}
        if install is not None:
            cache = [CACHE_CONFIG, f"--cache-directory={install.backend_directory.parent / 'caches'}"]
            servers[TRITON] = serving(PinnedTriton([tmp / "models"], install, pinning, args.triton_batch,
                                                   [*(cache if args.cache else ()), *tls_flags]))
        if args.floor:
            servers[FLOOR] = stack.enter_context(FloorServer(pinning, args.floor_threads))
        if args.floor_in_core:
            servers[FLOOR_IN_CORE] = stack.enter_context(FloorServer(pinning, args.floor_threads, in_core=True))
        if args.floor_lane:
            servers[FLOOR_LANE] = stack.enter_context(FloorServer(pinning, args.floor_threads, onnx_lane=model_path))
        for name, server in servers.items():
            server.wait_ready(120)
            for model in [*models, *([ONNX_MODEL] if args.onnx and name not in (TRITON, *FLOORS) else [])]:
                server.wait_model_ready(model, 120)
        if args.neighbor:
            stack.enter_context(busy_neighbor(pinning))
        bench = Bench(binary, servers, pinning, args.interval_ms, args.repeats, args.stability, args.threads,
                      args.streaming, client_tls.root if client_tls else None)
        for model in models:
            for protocol in protocols:
                if bench.streams(model) and protocol != "grpc":
                    continue
                names = [n for n in servers if n not in FLOORS or (protocol == "grpc" and not bench.streams(model)
                                                                   and n != FLOOR_LANE)]
                for concurrency in levels:
                    point = bench.point(names, model, protocol, concurrency)
                    results.setdefault(model, {}).setdefault(protocol, {})[str(concurrency)] = point
                    print("\n".join(report.point_lines(f"{model} {protocol} c={concurrency}", point, names)),
                          flush=True)
                    print_threads(point, names)
        if model_path is not None:
            for protocol in protocols:
                onnx[protocol] = bench.onnx_point([c.name for c in configs], protocol, model_path,
                                                  args.interval_ms / 1000)
                print("\n".join(report.onnx_lines(protocol, onnx[protocol], [c.name for c in configs])), flush=True)
                print_threads(onnx[protocol], [c.name for c in configs])
    shown = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
    load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}; {time.monotonic() - started:.0f} s")
    payload = {
        "python": sys.version.split()[0], "machine": platform.machine(), "cpus": os.cpu_count(),
        "perf_analyzer": (shown.stdout + shown.stderr).strip(),
        "triton": {"pytriton": install.pytriton_version, "sched_batch": args.triton_batch} if install else None,
        "floor": args.floor, "floor_in_core": args.floor_in_core, "floor_threads": args.floor_threads, "neighbor": args.neighbor, "inline": args.inline, "cache": args.cache, "tls": args.tls,
        "ours": {c.name: list(c.args) for c in configs},
        "pinning": {"server_cpus": pinning.server, "client_cpus": pinning.client},
        "interval_ms": args.interval_ms, "repeats": args.repeats, "stability": args.stability, "protocols": protocols,
        "load_average": {"before": load_before, "after": load_after},
        "results": results, "onnx": onnx,
    }
    print("\n".join(report.markdown(payload)))
    print(f"wrote {write_json('perf_analyzer', payload, args.json)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
