"""Writes the committed seed corpus (fuzz/corpus/<target>/) from a few valid requests and configs.

Run from the repository root: python -m fuzz.make_corpus   (idempotent; the files are tiny)
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from fuzz.signatures import ADD_SUB_CONFIG

CORPUS = Path(__file__).resolve().parent / "corpus"


def _grpc_seeds() -> list[bytes]:
    raw = np.arange(16, dtype=np.float32).tobytes()
    seeds = []
    request = pb.ModelInferRequest(model_name="add_sub", id="1")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        request.raw_input_contents.append(raw)
    request.outputs.add(name="OUTPUT0")
    seeds.append(request.SerializeToString())
    typed = pb.ModelInferRequest(model_name="add_sub", model_version="1")
    for name in ("INPUT0", "INPUT1"):
        typed.inputs.add(name=name, datatype="FP32", shape=[1, 16]).contents.fp32_contents.extend([0.5] * 16)
    typed.parameters["p"].int64_param = 1
    seeds.append(typed.SerializeToString())
    text = pb.ModelInferRequest(model_name="types")
    text.inputs.add(name="text_in", datatype="BYTES", shape=[1, 2])
    text.raw_input_contents.append(b"".join(struct.pack("<I", len(w)) + w for w in (b"ab", b"")))
    seeds.append(text.SerializeToString())
    return seeds


def _http_seeds() -> list[bytes]:
    values = [float(v) for v in range(16)]
    doc = {"id": "1", "inputs": [{"name": n, "datatype": "FP32", "shape": [1, 16], "data": values}
                                 for n in ("INPUT0", "INPUT1")], "outputs": [{"name": "OUTPUT0"}]}
    plain = b"\x00" + json.dumps(doc, separators=(",", ":")).encode()
    raw = np.arange(16, dtype=np.float32).tobytes()
    header = json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "parameters": {"binary_data_size": len(raw)}},
        {"name": "INPUT1", "datatype": "BYTES", "shape": [1, 1], "parameters": {"binary_data_size": 6}},
    ], "parameters": {"binary_data_output": True}}, separators=(",", ":")).encode()
    binary = b"\x01" + struct.pack("<H", len(header)) + header + raw + struct.pack("<I", 2) + b"hi"
    return [plain, binary]


def _config_seeds() -> list[bytes]:
    python = 'name: "m" backend: "python" input [ { name: "x" data_type: TYPE_STRING dims: [ -1 ] } ] ' \
             'output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] reshape { shape: [ ] } } ] ' \
             'instance_group [ { count: 2 kind: KIND_CPU } ] parameters { key: "k" value { string_value: "v" } }'
    ensemble = 'name: "e" platform: "ensemble" ensemble_scheduling { step [ { model_name: "m" model_version: -1 ' \
               'input_map { key: "x" value: "x" } output_map { key: "y" value: "y" } } ] }'
    batching = 'name: "b" platform: "onnxruntime_onnx" max_batch_size: 4 dynamic_batching { ' \
               'preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 100 } version_policy { latest { num_versions: 2 } }'
    return [ADD_SUB_CONFIG.encode(), python.encode(), ensemble.encode(), batching.encode()]


SEEDS = {"fuzz_grpc_decode": _grpc_seeds, "fuzz_http_decode": _http_seeds, "fuzz_config": _config_seeds}


def main() -> None:
    for target, seeds in SEEDS.items():
        directory = CORPUS / target
        directory.mkdir(parents=True, exist_ok=True)
        for seed in seeds():
            (directory / hashlib.sha1(seed).hexdigest()).write_bytes(seed)


if __name__ == "__main__":
    main()
