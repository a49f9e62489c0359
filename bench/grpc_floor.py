"""A do-nothing Triton gRPC server (echoes the first input back): the floor any Python gRPC server pays.

`python bench/grpc_floor.py PORT` serves until killed; the single-model benchmark measures it next to
ours so that the runtime's own cost can be told apart from gRPC's.
"""

from __future__ import annotations

import sys
from typing import Any

import grpc
import uvloop
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg


class EchoServicer(pbg.GRPCInferenceServiceServicer):  # type: ignore[misc]
    async def ServerLive(self, request: Any, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ModelInfer(self, request: pb.ModelInferRequest, context: Any) -> pb.ModelInferResponse:
        out = pb.ModelInferResponse(model_name=request.model_name, model_version="1", id=request.id)
        first = request.inputs[0]
        out.outputs.add(name="OUTPUT0", datatype=first.datatype, shape=first.shape)
        out.raw_output_contents.append(request.raw_input_contents[0])
        return out


async def serve(port: int) -> None:
    server = grpc.aio.server()
    pbg.add_GRPCInferenceServiceServicer_to_server(EchoServicer(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1])))
