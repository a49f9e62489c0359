"""The kubelet stand-in's pure parts: $(VAR) expansion, command lines, atomic volume writes, addresses,
probe counters, environment resolution."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from e2e.kubelet.network import AddressPool, bridge_name, gateway, netns_name, runtime_address_args
from e2e.kubelet.objects import ConfigError, field_value
from e2e.kubelet.probes import ProbeState, resolve_port
from e2e.kubelet.process import Mount, container_argv, expand, is_runtime, stand_in_image, wrapper_argv
from e2e.kubelet.volumes import DATA, atomic_write

POD = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"app": "web"}},
    "spec": {"nodeName": "e2e-gpu-0"},
}


def test_expand_follows_kubernetes_rules() -> None:
    env = {"A": "1", "B": "two"}
    assert expand("$(A)-$(B)", env) == "1-two"
    assert expand("$$(A) $(MISSING) $(echo hi) $", env) == "$(A) $(MISSING) $(echo hi) $"


def test_runtime_containers_get_the_runtime_and_the_pod_address() -> None:
    runtime = ("/venv/bin/ensemble-runtime",)
    plain = {"name": "r", "args": ["--model-repository=$(DIR)"]}
    explicit = {"name": "r", "command": ["ensemble-runtime"], "args": ["--http-port", "8000"]}
    other = {"name": "o", "command": ["python", "-m", "http.server"], "args": ["$(PORT)"]}
    assert is_runtime(plain) and is_runtime(explicit) and not is_runtime(other)
    assert container_argv(plain, {"DIR": "/m"}, runtime, "10.250.0.2") == [
        *runtime,
        "--model-repository=/m",
        *runtime_address_args("10.250.0.2"),
    ]
    assert container_argv(explicit, {}, runtime, "ip")[1:3] == ["--http-port", "8000"]
    assert container_argv(other, {"PORT": "80"}, runtime, "ip") == ["python", "-m", "http.server", "80"]


def test_wrapper_unshares_a_mount_namespace_and_passes_the_mounts() -> None:
    argv = wrapper_argv([Mount(Path("/src"), "/etc/x", read_only=True)], "/work", ["sleep", "1"])
    assert argv[1:5] == ["--mount", "--propagation", "private", "--"]
    assert argv[-2].endswith("enter.py")
    spec = json.loads(argv[-1])
    assert spec == {
        "mounts": [{"source": "/src", "target": "/etc/x", "read_only": True}],
        "working_dir": "/work",
        "keep": stand_in_image(),
        "argv": ["sleep", "1"],
    }


def test_atomic_write_switches_data_and_links_top_level_entries(tmp_path: Path) -> None:
    assert atomic_write(tmp_path, {"a.txt": (b"1", 0o644), "dir/b.txt": (b"2", 0o600)})
    first = os.readlink(tmp_path / DATA)
    assert (tmp_path / "a.txt").read_bytes() == b"1" and os.readlink(tmp_path / "a.txt") == f"{DATA}/a.txt"
    assert (tmp_path / "dir" / "b.txt").stat().st_mode & 0o777 == 0o600
    assert not atomic_write(tmp_path, {"a.txt": (b"1", 0o644), "dir/b.txt": (b"2", 0o600)})  # unchanged
    assert atomic_write(tmp_path, {"a.txt": (b"3", 0o644)})
    assert (tmp_path / "a.txt").read_bytes() == b"3"
    assert not (tmp_path / "dir").exists() and not (tmp_path / first).exists()


def test_address_pool_reuses_released_addresses_and_skips_listening_ones(tmp_path: Path) -> None:
    pool = AddressPool("10.250.0.0/24")
    first, second = pool.allocate("a"), pool.allocate("b")
    assert (first, second, pool.allocate("a")) == ("10.250.0.2", "10.250.0.3", "10.250.0.2")
    pool.release("a")
    assert pool.allocate("c") == "10.250.0.2"
    assert gateway("10.250.0.0/24") == "10.250.0.1" and netns_name("10.250.0.7") == "e2e-10-250-0-7"
    assert bridge_name("10.251.0.0/24") == "e2ebrfb0000" and len(bridge_name("10.250.0.0/16")) <= 15


def test_probe_counters_use_thresholds() -> None:
    probe = ProbeState({"periodSeconds": 2, "failureThreshold": 2, "successThreshold": 2}, 100.0, result=False)
    assert probe.due(100.0) and not probe.due(99.0)
    assert not probe.record(True, 100.0) and probe.next_at == 102.0
    assert probe.record(True, 102.0)
    assert probe.record(False, 104.0)  # one failure is below the threshold
    assert not probe.record(False, 106.0)
    container = {"name": "c", "ports": [{"name": "http", "containerPort": 8000}]}
    assert resolve_port("http", container) == 8000 and resolve_port(8001, container) == 8001


def test_field_values() -> None:
    assert field_value(POD, "metadata.labels['app']", "10.250.0.2", "127.0.0.1") == "web"
    assert field_value(POD, "status.podIP", "10.250.0.2", "127.0.0.1") == "10.250.0.2"
    assert field_value(POD, "metadata.labels", "", "") == 'app="web"'
    with pytest.raises(ConfigError):
        field_value(POD, "spec.unknown", "", "")
