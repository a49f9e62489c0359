"""bench/operator_scale.py at a tiny size, so the benchmark cannot rot: it runs end to end against the real
control plane, kwok, the chart and the real operator, every Ensemble becomes Ready, every timed Model change
reaches its Ensembles' ConfigMaps, and the pods' loopback IPs answer the operator's probes. The figures and
the PASS/FAIL of its targets are the benchmark's business, not this test's: only their presence is checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.conftest_plugin import CONTROL_PLANE_BINARIES
from tests.infra.process import http_status
from tests.infra.tools import ToolLocator, require

pytestmark = pytest.mark.controlplane

REPO_ROOT = Path(__file__).resolve().parents[3]
TINY = [
    "--ensembles", "3", "--models", "6", "--replicas", "2", "--small-ensembles", "1",
    "--idle-seconds", "4", "--quiet-seconds", "3", "--changes", "2", "--change-gap", "1",
    "--ready-timeout", "120", "--change-timeout", "60",
]  # fmt: skip


def test_operator_scale_bench_runs_at_a_tiny_size(tool_locator: ToolLocator, tmp_path: Path) -> None:
    require(*CONTROL_PLANE_BINARIES, "helm", locator=tool_locator)
    # The pod responder needs port 8000; where something else holds it, the pods' probes go there instead.
    responder = http_status("http://127.0.0.1:8000/v2/health/live") is None
    out = tmp_path / "scale.json"
    run = subprocess.run(
        [sys.executable, "bench/operator_scale.py", *TINY, "--pod-http", "runtime" if responder else "none",
         "--json", str(out), "--workdir", str(tmp_path / "work")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(out.read_text())

    for size, expected in (("small", 1), ("full", 3)):
        part = result[size]
        assert (part["ensembles"], part["ready"]) == (expected, expected), part
        assert part["all_ready_s"] is not None
        assert part["idle"]["window_s"] >= 4
        assert part["idle"]["operator_rss_mib"] > 0
    pods = result["full"]["pods"]
    assert pods["pods"] == pods["with_ip_in_pod_cidr"] == 3 * 2, pods
    if responder:
        assert pods["sample_ip_http_status"] == 200, pods
    changes = result["model_changes"]
    assert len(changes["samples"]) == 2 and changes["timed_out"] == 0, changes
    assert all(s["seconds"] > 0 and s["requests"] > 0 for s in changes["samples"]), changes
    assert set(result["targets"]) == {
        "idle_independent_of_unchanged_ensembles",
        "model_change_touches_only_its_ensembles",
        "model_change_p99_to_configmap",
    }
    for line in ("PASS", "FAIL"):
        if any(t["pass"] is (line == "PASS") for t in result["targets"].values()):
            assert line in run.stdout
