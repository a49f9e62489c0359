"""Medians over a point's runs, ratios of each configuration of ours to Triton, and the printed table.

A run is a dict: `ok`, `throughput_rps`, `p50_us`, `p99_us` (perf_analyzer's CSV), `server_requests` and
`server_cpu_s` (the server's success count and its process tree's CPU seconds, both taken just before and just
after perf_analyzer ran) and `cpu_ms_per_1000` = server CPU milliseconds per 1,000 requests (numerically the
server CPU microseconds per request). That one is kept for every run in which the server completed requests,
also when perf_analyzer gave up on it (`Failed to obtain stable measurement`): the server's work was real.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.common import RESULTS

TRITON = "triton"  # the peer's name among the servers
FLOOR = "floor"  # bench.pa.floor: the native core and one loop wake-up per call (gRPC only)
FLOOR_IN_CORE = "floor-core"  # bench.pa.floor --in-core: the native core answering alone, no Python per call
FLOOR_LANE = "floor-lane"  # bench.pa.floor --onnx-lane: the ONNX model run and answered in the core (ONNX point only)
FLOORS = (FLOOR, FLOOR_IN_CORE, FLOOR_LANE)

CLIENT_FIGURES = ("throughput_rps", "p50_us", "p99_us")
RATIOS = {"throughput": "throughput_rps", "p50": "p50_us", "cpu_per_1000": "cpu_ms_per_1000"}


def median(values: Sequence[float]) -> float:
    return round(statistics.median(values), 1) if values else math.nan


def summarize(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Medians of perf_analyzer's figures over the runs that completed and of the server CPU over the runs in
    which the server completed requests, with the counts and the failures' last lines."""
    good = [r for r in runs if r["ok"]]
    cpu = [r["cpu_ms_per_1000"] for r in runs if r["cpu_ms_per_1000"] is not None]
    summary: dict[str, Any] = {figure: median([r[figure] for r in good]) for figure in CLIENT_FIGURES}
    summary.update(cpu_ms_per_1000=median(cpu), runs_ok=len(good), cpu_runs=len(cpu), runs=len(runs),
                   errors=[r["error"] for r in runs if not r["ok"]])
    return summary


def _ratio(value: float, base: float) -> float | None:
    return round(value / base, 2) if base and math.isfinite(value) and math.isfinite(base) else None


def ratios(point: Mapping[str, Mapping[str, Any]], names: Sequence[str], reference: str) -> dict[str, Any]:
    """name -> figure -> name's median / reference's median (None where either has no completed run)."""
    base = point[reference]
    out: dict[str, Any] = {}
    for name in names:
        row = point[name]
        out[name] = {key: _ratio(row[fig], base[fig]) for key, fig in RATIOS.items()}
    return out


def point_lines(label: str, point: Mapping[str, Any], servers: Sequence[str]) -> list[str]:
    lines = []
    for name in servers:
        row = point[name]
        ratio = point.get("ratio", {}).get(name)
        versus = "" if ratio is None else (
            f" | /triton thr {ratio['throughput']} p50 {ratio['p50']} cpu {ratio['cpu_per_1000']}")
        lines.append(f"{label:<22} {name:<10} {row['throughput_rps']:>9} infer/s p50 {row['p50_us']:>8} us "
                     f"cpu {row['cpu_ms_per_1000']:>7} ms/1000 ({row['runs_ok']}/{row['runs']} ok){versus}")
    return lines


def onnx_lines(protocol: str, point: Mapping[str, Any], ours: Sequence[str]) -> list[str]:
    direct = point["onnxruntime"]
    lines = [f"{'add_sub ' + protocol + ' c=1':<22} {'ort.run':<10} p50 {direct['p50_us']:>8} us (in-process)"]
    for name in [*ours, *(n for n in FLOORS if n in point)]:
        row = point[name]
        lines.append(f"{'add_sub ' + protocol + ' c=1':<22} {name:<10} p50 {row['p50_us']:>8} us "
                     f"overhead {point['overhead_us'][name]:>8} us cpu {row['cpu_ms_per_1000']:>7} ms/1000 "
                     f"({row['runs_ok']}/{row['runs']} ok)")
    return lines


def _cell(value: object) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:g}"


def markdown(payload: Mapping[str, Any]) -> list[str]:
    """The whole run as a Markdown table (what bench/README.md quotes), from the JSON the benchmark wrote."""
    ours = list(payload["ours"])
    lines = ["| workload | protocol | c | server | infer/s | p50 us | CPU ms / 1,000 req | "
             "thr / Triton | p50 / Triton | CPU / Triton |", "|" + "---|" * 10]
    for model, protocols in payload["results"].items():
        for protocol, levels in protocols.items():
            for concurrency, point in levels.items():
                for name in [*ours, *(n for n in (*FLOORS, TRITON) if n in point)]:
                    row, ratio = point[name], point.get("ratio", {}).get(name, {})
                    lines.append(
                        f"| `{model}` | {protocol} | {concurrency} | {name} | {_cell(row['throughput_rps'])} | "
                        f"{_cell(row['p50_us'])} | {_cell(row['cpu_ms_per_1000'])} | {_cell(ratio.get('throughput'))} | "
                        f"{_cell(ratio.get('p50'))} | {_cell(ratio.get('cpu_per_1000'))} |")
    if payload.get("onnx"):
        lines += ["", "| ONNX `add_sub`, c=1 | server | p50 us | ort.run p50 us | overhead us | CPU ms / 1,000 req |",
                  "|" + "---|" * 6]
        for protocol, point in payload["onnx"].items():
            for name in [*ours, *(n for n in FLOORS if n in point)]:
                lines.append(f"| {protocol} | {name} | {_cell(point[name]['p50_us'])} | "
                             f"{_cell(point['onnxruntime']['p50_us'])} | {_cell(point['overhead_us'][name])} | "
                             f"{_cell(point[name]['cpu_ms_per_1000'])} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m bench.pa.report [JSON]`: the Markdown table of a run (default bench/results/perf_analyzer.json)."""
    paths = list(sys.argv[1:] if argv is None else argv) or [str(RESULTS / "perf_analyzer.json")]
    print("\n".join(markdown(json.loads(Path(paths[0]).read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
