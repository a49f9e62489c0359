"""A real HTTP server over a real DataPlane and ONNX Runtime models, on a free loopback port in its own thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx
from aiohttp import web
from ensemble_runtime.backends.onnxruntime_backend import OnnxRuntimeBackend
from ensemble_runtime.dataplane import DataPlane
from ensemble_runtime.inference import InferRequest, InferResponse
from ensemble_runtime.model_manager import ModelManager
from ensemble_runtime.protocol.http_server import build_http_app, start_http
from ensemble_runtime.registry import Registry
from ensemble_runtime.repository_plane import RepositoryPlane
from ensemble_runtime.storage import Storage
from ensemble_runtime.version_loader import VersionLoader
from onnx import TensorProto, helper

MAX_BODY_BYTES = 256 * 1024
LOADED = ("add", "ident", "half", "pipe")  # "spare" stays unloaded until a test loads it


Io = Sequence[tuple[str, int, Sequence[str | int]]]  # name, ONNX element type, shape


def _onnx(path: Path, nodes: list[onnx.NodeProto], inputs: Io, outputs: Io) -> None:
    graph = helper.make_graph(
        nodes,
        path.parent.parent.name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path.parent.mkdir(parents=True)
    onnx.save(model, str(path))


def _add_model(repo: Path, name: str) -> None:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1; FP32 [-1, 4]."""
    io: Io = [("INPUT0", TensorProto.FLOAT, ["batch", 4]), ("INPUT1", TensorProto.FLOAT, ["batch", 4])]
    out: Io = [("OUTPUT0", TensorProto.FLOAT, ["batch", 4]), ("OUTPUT1", TensorProto.FLOAT, ["batch", 4])]
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
    ]
    _onnx(repo / name / "1" / "model.onnx", nodes, io, out)
    tensors = "".join(
        f'{kind} {{ name: "{n}" data_type: TYPE_FP32 dims: [ 4 ] }}\n'
        for kind, n in (("input", "INPUT0"), ("input", "INPUT1"), ("output", "OUTPUT0"), ("output", "OUTPUT1"))
    )
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n{tensors}'
    )


def _ident_model(repo: Path) -> None:
    """Identity for INT64 [-1, 3], BOOL [-1, 2] and BYTES [-1, 2]."""
    specs = [("I64", "O64", TensorProto.INT64, "TYPE_INT64", 3), ("B", "OB", TensorProto.BOOL, "TYPE_BOOL", 2),
             ("S", "OS", TensorProto.STRING, "TYPE_STRING", 2)]  # fmt: skip
    _onnx(
        repo / "ident" / "1" / "model.onnx",
        [helper.make_node("Identity", [i], [o]) for i, o, *_ in specs],
        [(i, t, ["batch", d]) for i, _, t, _, d in specs],
        [(o, t, ["batch", d]) for _, o, t, _, d in specs],
    )
    tensors = "".join(
        f'input {{ name: "{i}" data_type: {c} dims: [ {d} ] }}\noutput {{ name: "{o}" data_type: {c} dims: [ {d} ] }}\n'
        for i, o, _, c, d in specs
    )
    (repo / "ident" / "config.pbtxt").write_text(
        f'name: "ident"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n{tensors}'
    )


def _half_model(repo: Path) -> None:
    """FP16 [2, 2] identity without batching."""
    _onnx(
        repo / "half" / "1" / "model.onnx",
        [helper.make_node("Identity", ["X"], ["Y"])],
        [("X", TensorProto.FLOAT16, [2, 2])],
        [("Y", TensorProto.FLOAT16, [2, 2])],
    )
    (repo / "half" / "config.pbtxt").write_text(
        'name: "half"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
        'input { name: "X" data_type: TYPE_FP16 dims: [ 2, 2 ] }\n'
        'output { name: "Y" data_type: TYPE_FP16 dims: [ 2, 2 ] }\n'
    )


def _pipe_ensemble(repo: Path) -> None:
    """An ensemble over `add`: SUM and DIFF of A and B."""
    (repo / "pipe" / "1").mkdir(parents=True)
    (repo / "pipe" / "config.pbtxt").write_text(
        """name: "pipe"
platform: "ensemble"
max_batch_size: 8
input { name: "A" data_type: TYPE_FP32 dims: [ 4 ] }
input { name: "B" data_type: TYPE_FP32 dims: [ 4 ] }
output { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] }
output { name: "DIFF" data_type: TYPE_FP32 dims: [ 4 ] }
ensemble_scheduling { step {
  model_name: "add" model_version: -1
  input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
  output_map { key: "OUTPUT0" value: "SUM" } output_map { key: "OUTPUT1" value: "DIFF" }
} }
"""
    )


def build_repository(repo: Path) -> None:
    _add_model(repo, "add")
    _add_model(repo, "spare")
    _ident_model(repo)
    _half_model(repo)
    _pipe_ensemble(repo)


@dataclass
class Served:
    url: str  # host:port, as tritonclient takes it
    dataplane: DataPlane
    loop: asyncio.AbstractEventLoop


class ServerThread:
    """Runs the event loop, the data plane and the HTTP app in one thread, as the runtime's server does."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="http-test-server", daemon=True)
        self.runner: web.AppRunner | None = None
        self.dataplane: DataPlane | None = None

    def start(self) -> Served:
        self.thread.start()
        url = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=120)
        assert self.dataplane is not None
        return Served(url, self.dataplane, self.loop)

    async def _start(self) -> str:
        registry = Registry()

        async def call(request: InferRequest) -> InferResponse:
            assert self.dataplane is not None
            return await self.dataplane.infer(request)

        manager = ModelManager(
            roots=[self.repo],
            registry=registry,
            loader=VersionLoader(backends={"onnxruntime": OnnxRuntimeBackend()}, caller=call),
        )
        self.dataplane = DataPlane(registry, manager)
        repository = RepositoryPlane(manager, Storage([], registry), repository_control=True)  # as in explicit mode
        await manager.load(list(LOADED))
        self.runner = await start_http(build_http_app(self.dataplane, repository, MAX_BODY_BYTES), "127.0.0.1", 0)
        host, port = self.runner.addresses[0][:2]
        return f"{host}:{port}"

    async def _stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
        if self.dataplane is not None:
            for name, rec in list(self.dataplane.registry.records.items()):
                if rec.versions:
                    await self.dataplane.manager.unload(name)
            await self.dataplane.registry.wait_retired()

    def stop(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(timeout=60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=60)
            self.loop.close()
