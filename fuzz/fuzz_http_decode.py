"""Fuzz target: an HTTP infer body (JSON header, optional binary tensors) -> http_codec.decode_infer_request ->
validation against add_sub's signature. The input's first bytes say how Inference-Header-Content-Length is
given (see `split`).

Run: python -m fuzz.fuzz_http_decode [libFuzzer flags] CORPUS_DIR...   (or `make fuzz` for every target)
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["ensemble_runtime"]):
    from ensemble_runtime.protocol import http_codec
    from ensemble_runtime.validation import check_inputs, check_requested

from fuzz import invariant
from fuzz.signatures import ADD_SUB


def split(data: bytes) -> tuple[bytes, str | None]:
    """Input layout: mode byte; mode % 4 == 0: the rest is the body, no header; else 2 bytes little-endian
    header length, then the body. The header is given as that number (1), that number minus 32768 (2, may be
    negative) or as the number in hex (3, not an integer to the server)."""
    mode = data[0] % 4
    if mode == 0 or len(data) < 3:
        return data[1:], None
    length = int.from_bytes(data[1:3], "little")
    value = {1: str(length), 2: str(length - 32768), 3: hex(length)}[mode]
    return data[3:], value


def one_input(data: bytes) -> None:
    if not data:
        return
    body, length = split(data)

    def decode_and_validate() -> None:
        decoded = http_codec.decode_infer_request(body, length, "add_sub")
        check_inputs(ADD_SUB, decoded.request.inputs, decoded.declared)
        check_requested(ADD_SUB, decoded.request.requested_outputs)

    invariant.check(decode_and_validate)


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
