"""Fuzz target: bytes -> ModelInferRequest -> grpc_codec.decode_request -> validation against add_sub's signature.

Run: python -m fuzz.fuzz_grpc_decode [libFuzzer flags] CORPUS_DIR...   (or `make fuzz` for every target)
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["ensemble_runtime"]):
    from ensemble_runtime.protocol import grpc_codec
    from ensemble_runtime.validation import check_inputs, check_requested
    from google.protobuf.message import DecodeError
    from tritonclient.grpc import service_pb2 as pb

from fuzz import invariant
from fuzz.signatures import ADD_SUB


def one_input(data: bytes) -> None:
    try:
        request = pb.ModelInferRequest.FromString(data)
    except DecodeError:
        return  # protobuf's own refusal; the server turning it into a status is the transport's job

    def decode_and_validate() -> None:
        decoded, declared = grpc_codec.decode_request(request)
        check_inputs(ADD_SUB, decoded.inputs, declared)
        check_requested(ADD_SUB, decoded.requested_outputs)

    invariant.check(decode_and_validate)


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
