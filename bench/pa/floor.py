"""The floor of our gRPC front end: the native core and one wake-up of an event loop per call, and nothing else.

A server with ours' shape (the Rust core, `GrpcCore`, hands each call to a uvloop loop through its descriptor,
the loop answers) whose answer to a `ModelInfer` is its first input echoed as `OUTPUT0`: no decoding into
tensors, no data plane, no model, no model thread. Its latency under perf_analyzer is what any request to our
runtime pays before the runtime does anything, on this machine: the loopback round trip, the core's thread and
one hand-off to the loop and back. `bench/perf_analyzer.py --floor` measures it next to ours and Triton.

It answers what perf_analyzer asks before and around its runs, for any model name: metadata and config (one
FP32 [16] input INPUT0, one output OUTPUT0, no batching: `add_one_0`'s signature), readiness, and statistics
(its success count per model, which the benchmark divides the CPU time by).

With `--in-core` the core answers each `ModelInfer` itself (the same echo, made in Rust: `floor_echo.rs`), and
nothing reaches Python for it: what the transport costs alone, without the hand-over to the loop.

With `--onnx-lane MODEL_FILE` the core's ONNX lane (`ort_lane.rs`) serves that file as `add_sub` (bench/models'
ONNX model: INPUT0, INPUT1 FP32 [16] -> OUTPUT0, OUTPUT1, max batch 8), on the onnxruntime wheel's own library:
its requests are run and answered in the core, the others echoed as above. What an ONNX request costs when no
Python runs for it.

    python -m bench.pa.floor --grpc-port PORT [--grpc-address 127.0.0.1] [--threads 0] [--in-core]
        [--onnx-lane MODEL_FILE]
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop
from ensemble_runtime import thread_policy
from ensemble_runtime.backends.ort_library import onnxruntime_library
from ensemble_runtime.protocol._native import Call
from ensemble_runtime.protocol.native_grpc import new_core
from ensemble_runtime.protocol.on_loop import drive
from ensemble_runtime.settings import GrpcConnections
from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb

from bench.models import ONNX_MODEL

SERVICE = "/inference.GRPCInferenceService/"
MODEL_INFER = SERVICE + "ModelInfer"
UNIMPLEMENTED = 12
INVALID_ARGUMENT = 3
SHAPE = (16,)


@dataclass(frozen=True)
class Signature:
    """What the floor says a model takes and gives (FP32 tensors of `SHAPE`), and its batch bound."""

    inputs: tuple[str, ...] = ("INPUT0",)
    outputs: tuple[str, ...] = ("OUTPUT0",)
    max_batch_size: int = 0
    backend: str = "python"


ECHOED = Signature()
LANE_MODEL = ONNX_MODEL
LANE_SIGNATURE = Signature(("INPUT0", "INPUT1"), ("OUTPUT0", "OUTPUT1"), 8, "onnxruntime")


def metadata(name: str, signature: Signature) -> pb.ModelMetadataResponse:
    shape = [*([-1] if signature.max_batch_size else []), *SHAPE]
    tensors = pb.ModelMetadataResponse.TensorMetadata
    return pb.ModelMetadataResponse(
        name=name, versions=["1"], platform=signature.backend,
        inputs=[tensors(name=n, datatype="FP32", shape=shape) for n in signature.inputs],
        outputs=[tensors(name=n, datatype="FP32", shape=shape) for n in signature.outputs],
    )


def config(name: str, signature: Signature) -> pb.ModelConfigResponse:
    return pb.ModelConfigResponse(config=mc.ModelConfig(
        name=name, backend=signature.backend, max_batch_size=signature.max_batch_size,
        input=[mc.ModelInput(name=n, data_type=mc.TYPE_FP32, dims=list(SHAPE)) for n in signature.inputs],
        output=[mc.ModelOutput(name=n, data_type=mc.TYPE_FP32, dims=list(SHAPE)) for n in signature.outputs],
    ))


def statistics(name: str, counted: Counter[str], in_core: Callable[[str], int]) -> pb.ModelStatisticsResponse:
    """Every model asked for (or counted), with its success count: each phase reports that count and 1 us each,
    so perf_analyzer's statistics arithmetic has whole numbers to work with. The requests the core answered itself
    (`in_core(model)`) count too."""
    names = [name] if name else sorted(counted)
    out = pb.ModelStatisticsResponse()
    for model in names:
        count = counted[model] + in_core(model)
        stat = out.model_stats.add(name=model, version="1", inference_count=count, execution_count=count)
        for phase in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
            duration = getattr(stat.inference_stats, phase)
            duration.count, duration.ns = count, 1000 * count
    return out


def answers(counted: Counter[str], in_core: Callable[[str], int], signatures: Mapping[str, Signature],
            ) -> dict[str, tuple[Callable[[bytes], Any], Callable[[Any], Message]]]:
    """Method path -> (parse the request, answer it), for what perf_analyzer and the benchmark ask."""

    def signature(name: str) -> Signature:
        return signatures.get(name, ECHOED)

    return {
        SERVICE + "ServerLive": (pb.ServerLiveRequest.FromString, lambda _: pb.ServerLiveResponse(live=True)),
        SERVICE + "ServerReady": (pb.ServerReadyRequest.FromString, lambda _: pb.ServerReadyResponse(ready=True)),
        SERVICE + "ModelReady": (pb.ModelReadyRequest.FromString, lambda _: pb.ModelReadyResponse(ready=True)),
        SERVICE + "ServerMetadata": (pb.ServerMetadataRequest.FromString,
                                     lambda _: pb.ServerMetadataResponse(name="floor", version="0")),
        SERVICE + "ModelMetadata": (pb.ModelMetadataRequest.FromString, lambda r: metadata(r.name, signature(r.name))),
        SERVICE + "ModelConfig": (pb.ModelConfigRequest.FromString, lambda r: config(r.name, signature(r.name))),
        SERVICE + "ModelStatistics": (pb.ModelStatisticsRequest.FromString, lambda r: statistics(r.name, counted, in_core)),
    }


class Floor:
    """The core and the loop's one callback: every call taken is answered in the same wake-up."""

    def __init__(self, threads: int = 1, in_core: bool = False, onnx_lane: Path | None = None) -> None:
        self.core = new_core(64 * 1024 * 1024, [], threads, GrpcConnections())
        if in_core:
            self.core.answer_infer_in_core()
        self.lane = self.core.onnx_lane()
        signatures: dict[str, Signature] = {}
        if onnx_lane is not None:
            library = onnxruntime_library()
            if library is None:
                raise SystemExit("--onnx-lane: this onnxruntime ships no libonnxruntime.so to load")
            tensors = [(n, "FP32", list(SHAPE)) for n in LANE_SIGNATURE.inputs]
            outputs = [(n, "FP32", list(SHAPE)) for n in LANE_SIGNATURE.outputs]
            self.lane.serve(LANE_MODEL, "1", str(onnx_lane), str(library), tensors, outputs,
                            LANE_SIGNATURE.max_batch_size)
            signatures[LANE_MODEL] = LANE_SIGNATURE
        self.counted: Counter[str] = Counter()
        self.routes = answers(self.counted, self._in_core, signatures)
        self.port = 0

    def _in_core(self, model: str) -> int:
        lane = self.lane.counts(model)
        return self.core.answered_in_core + (lane[0] if lane is not None else 0)

    def drain(self) -> None:
        for call in self.core.take():
            if isinstance(call, Call):
                self.answer(call)

    def answer(self, call: Call) -> None:
        if call.method == MODEL_INFER:
            request = call.request
            first = request.inputs[0]
            data = bytes(request.raw_input_contents[0])
            self.counted[request.model_name] += 1
            call.reply_infer(request.model_name, "1", request.id, {}, [("OUTPUT0", first.datatype, first.shape, data)])
            return
        route = self.routes.get(call.method)
        if route is None:
            call.fail(UNIMPLEMENTED, f"{call.method} is not served by the floor server")
            return
        parse, respond = route
        try:
            request = parse(call.payload)
        except Exception as exc:  # protobuf's DecodeError: answered, so the client does not wait for nothing
            call.fail(INVALID_ARGUMENT, f"not a valid request message ({type(exc).__name__})")
            return
        call.reply(respond(request).SerializeToString())


async def serve(floor: Floor, address: str, port: int, stop: asyncio.Event | None = None) -> None:
    """Serves until `stop` is set (never, without one); `floor.port` is the port bound once it serves."""
    floor.port = floor.core.start(address, port)
    loop = asyncio.get_running_loop()
    loop.add_reader(floor.core.fileno(), floor.drain)
    driver = drive(loop, floor.core, floor.drain)  # threads 0: the loop's thread drives the core, as the runtime's would
    await (stop or asyncio.Event()).wait()
    loop.remove_reader(floor.core.fileno())
    if driver is None:
        await asyncio.to_thread(floor.core.stop, 1.0)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--grpc-address", default="127.0.0.1")
    parser.add_argument("--threads", type=int, default=1,
                        help="the core's threads (0: the event loop's thread drives it), as --grpc-native-threads")
    parser.add_argument("--in-core", action="store_true",
                        help="the core answers ModelInfer itself (the echo made in Rust), nothing of it in Python")
    parser.add_argument("--onnx-lane", type=Path, metavar="MODEL_FILE",
                        help=f"serve this .onnx file as {LANE_MODEL} on the core's ONNX lane (its signature)")
    parser.add_argument("--thread-policy", choices=thread_policy.CHOICES, default=thread_policy.INHERIT,
                        help="as the runtime's (inherit, its default)")
    args = parser.parse_args(argv)
    thread_policy.apply(args.thread_policy)
    uvloop.run(serve(Floor(args.threads, args.in_core, args.onnx_lane), args.grpc_address, args.grpc_port))


if __name__ == "__main__":
    main()
