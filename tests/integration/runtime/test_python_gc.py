"""`--python-gc` on a real runtime process (runtime/ensemble_runtime/python_gc.py).

Tuned (the default):
- what the initial load made is frozen;
- a model version that holds its memory in a reference cycle gives it back when it is unloaded. That holds
  whether it was loaded at start (frozen) or later, and needs no other request or load to happen (one in no cycle
  of its own is freed at once under stock settings too: the runtime's objects hold none in one);
- a 2-step ensemble's requests in flight trip no collection (concurrency 16, gRPC and HTTP), where stock settings
  trip some (tens here); nor do refused requests.

Stock leaves Python's collector as Python sets it."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from bench.models import build_chain_repository
from tests.infra.process import poll_until
from tests.support.liveness import memory_kib
from tests.support.runtime_process import RuntimeProcess

BLOB_MIB = 256  # what the cyclic model holds
CHAIN = "chain2"  # IN -> add_one_0 -> add_one_1 -> OUT, python steps (bench/models)
WAIT_SECS = 60.0  # a load, an unload's drain and a settle on a busy 2-core machine

CYCLIC_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

CYCLIC_MODEL = f"""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.blob = np.ones({BLOB_MIB} << 17)  # float64: {BLOB_MIB} MiB, every page written
        self.me = self  # a cycle: only the cyclic collector frees this instance, and its blob with it

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy())]) for r in requests]
"""


PLAIN_MODEL = CYCLIC_MODEL.replace("self.me = self", "self.me = None")  # no cycle of its own
assert PLAIN_MODEL != CYCLIC_MODEL


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """`py_cyclic` (its instance in a cycle) and `py_plain` (not), each holding BLOB_MIB."""
    for name, source in (("py_cyclic", CYCLIC_MODEL), ("py_plain", PLAIN_MODEL)):
        model = tmp_path / name
        (model / "1").mkdir(parents=True)
        (model / "config.pbtxt").write_text(CYCLIC_CONFIG)
        (model / "1" / "model.py").write_text(source)
    return tmp_path


def _rss_mib(pid: int) -> float:
    return memory_kib(pid, "VmRSS") / 1024


def _gc_metrics(proc: RuntimeProcess) -> dict[str, float]:
    """The python gc families, as the metrics port serves them: `collections{generation="N"}` as `collections N`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=30) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("ensemble_python_gc_"):
            continue
        name, value = line.removeprefix("ensemble_python_gc_").rsplit(" ", 1)
        found[name.replace('{generation="', " ").replace('"}', "")] = float(value)
    return found


def _answer(client: grpcclient.InferenceServerClient, model: str = "py_cyclic") -> None:
    x = np.arange(4, dtype=np.float32)
    given = grpcclient.InferInput("x", [4], "FP32")
    given.set_data_from_numpy(x)
    np.testing.assert_array_equal(client.infer(model, [given]).as_numpy("y"), x)


def _wait_freed(proc: RuntimeProcess, loaded_mib: float, what: str) -> None:
    poll_until(lambda: _rss_mib(proc.pid) < loaded_mib - BLOB_MIB * 0.8, timeout=WAIT_SECS, what=what,
               detail=lambda: f"RSS {_rss_mib(proc.pid):.0f} MiB, loaded {loaded_mib:.0f} MiB")


def test_an_unloaded_version_held_in_a_cycle_is_freed_at_once(repository: Path) -> None:
    with RuntimeProcess([repository], ["--model-control-mode=explicit", "--load-model=py_cyclic"]) as proc:
        proc.wait_ready(WAIT_SECS)
        with proc.grpc_client() as client:
            _answer(client)
            metrics = _gc_metrics(proc)
            assert metrics["settles"] >= 1 and metrics["frozen_objects"] > 10_000, metrics  # the heap as loaded
            loaded = _rss_mib(proc.pid)
            assert loaded > BLOB_MIB, loaded

            client.unload_model("py_cyclic")  # loaded at start: frozen with the rest
            _wait_freed(proc, loaded, "the version loaded at start freed")

            client.load_model("py_cyclic")  # loaded later: not frozen before the commit settles it
            _answer(client)
            reloaded = _rss_mib(proc.pid)
            assert reloaded > BLOB_MIB, reloaded
            client.unload_model("py_cyclic")
            _wait_freed(proc, reloaded, "the version loaded later freed")
            assert _gc_metrics(proc)["settles"] > metrics["settles"]


def test_an_unloaded_version_in_no_cycle_is_freed_at_once_under_stock_settings_too(repository: Path) -> None:
    """The runtime's own objects put no model in a cycle (an instance's thread and its version's queue refer to
    each other: the thread lets go of the model as it ends), so reference counting alone frees one that is in
    none of its own."""
    with RuntimeProcess([repository], ["--model-control-mode=explicit", "--load-model=py_plain",
                                       "--python-gc=stock"]) as proc:
        proc.wait_ready(WAIT_SECS)
        with proc.grpc_client() as client:
            _answer(client, "py_plain")
            loaded = _rss_mib(proc.pid)
            assert loaded > BLOB_MIB, loaded
            client.unload_model("py_plain")
            _wait_freed(proc, loaded, "the version freed by reference counting")
            assert _gc_metrics(proc)["settles"] == 0


async def _traffic(url: str, requests: int, concurrency: int) -> None:
    x = np.arange(16, dtype=np.float32)
    async with grpcaio.InferenceServerClient(url) as client:
        async def worker(count: int) -> None:
            for _ in range(count):
                given = grpcaio.InferInput("IN", [16], "FP32")
                given.set_data_from_numpy(x)
                result = await client.infer(CHAIN, [given])
                np.testing.assert_array_equal(result.as_numpy("OUT"), x + 2)

        await asyncio.gather(*(worker(requests // concurrency) for _ in range(concurrency)))


def _http_traffic(url: str, requests: int, concurrency: int) -> None:
    x = np.arange(16, dtype=np.float32)
    given = httpclient.InferInput("IN", [16], "FP32")
    given.set_data_from_numpy(x)
    with httpclient.InferenceServerClient(url, concurrency=concurrency) as client:
        for pending in [client.async_infer(CHAIN, [given]) for _ in range(requests)]:
            np.testing.assert_array_equal(pending.get_result().as_numpy("OUT"), x + 2)


def _refused(proc: RuntimeProcess, requests: int) -> None:
    """`requests` of 1 MiB each that the server refuses (the wrong shape): their bytes must not linger."""
    wrong = grpcclient.InferInput("IN", [1 << 18], "FP32")
    wrong.set_data_from_numpy(np.zeros(1 << 18, np.float32))
    with proc.grpc_client() as client:
        for _ in range(requests):
            with pytest.raises(InferenceServerException, match="unexpected shape"):
                client.infer(CHAIN, [wrong])


@pytest.mark.parametrize("policy", ["tuned", "stock"])
def test_requests_in_flight_trip_no_collection(tmp_path: Path, policy: str) -> None:
    """Reference counting frees what a request allocates, but a 2-step ensemble's requests in flight at
    concurrency 16 hold more container objects than Python's 700 between them: under stock settings the
    youngest generation is collected again and again, finding nothing. With 2,000 as its threshold no collection
    is made, over gRPC or HTTP, nor by 500 refused requests of 1 MiB each (a request path that leaked container
    objects, or made its bytes linger in cycles, would make them)."""
    build_chain_repository(tmp_path, [2])
    with RuntimeProcess([tmp_path], [f"--python-gc={policy}"]) as proc:
        proc.wait_ready(WAIT_SECS)
        before = _gc_metrics(proc)
        asyncio.run(_traffic(proc.grpc_url, 3200, 16))
        _http_traffic(proc.http_url, 1600, 16)
        _refused(proc, 500)
        after = _gc_metrics(proc)
        young = after["collections 0"] - before["collections 0"]
        print(f"{policy}: {young:.0f} collections of the youngest generation, "
              f"{after['collections 2'] - before['collections 2']:.0f} of the oldest")
        if policy == "stock":  # what the threshold is for (tens of them here): otherwise this test shows nothing
            assert young > 0, (before, after)
            return
        assert after["settles"] == before["settles"], (before, after)
        assert young <= 1, (before, after)
        assert after["collections 2"] == before["collections 2"], (before, after)


def test_stock_leaves_the_collector_as_python_sets_it(repository: Path) -> None:
    with RuntimeProcess([repository], ["--python-gc=stock"]) as proc:
        proc.wait_ready(WAIT_SECS)
        with proc.grpc_client() as client:
            _answer(client)
        metrics = _gc_metrics(proc)
        assert metrics["frozen_objects"] == 0 and metrics["settles"] == 0, metrics
        assert metrics["settle_seconds"] == 0, metrics
