"""The repository both servers serve for the statistics comparison (tests/integration/triton_peer/test_statistics).

Besides `chain2` (add_one_0 -> add_one_1, from bench.models): `add_one_batched` (the same model with
`max_batch_size: 8` and dynamic batching), `refuse_negative` (answers an error response when X[0] < 0) and
`guarded` (add_one_0 -> refuse_negative), so failures inside a model and inside an ensemble are counted too.
"""

from __future__ import annotations

from pathlib import Path

from bench.models import HERE as BENCH_MODELS
from bench.models import TENSOR, build_chain_repository

_REFUSE_NEGATIVE = '''\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if x.reshape(-1)[0] < 0:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("negative input")))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x.astype(np.float32))]))
        return responses
'''


def _model(root: Path, name: str, config: str, source: str | None = None) -> None:
    (root / name / "1").mkdir(parents=True, exist_ok=True)
    (root / name / "config.pbtxt").write_text(config, encoding="utf-8")
    if source is not None:
        (root / name / "1" / "model.py").write_text(source, encoding="utf-8")


def build_stats_repository(root: Path) -> None:
    build_chain_repository(root, lengths=(2,))
    io = f'input [ {{ name: "X" {TENSOR} }} ]\noutput [ {{ name: "Y" {TENSOR} }} ]\n'
    one = "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    _model(root, "add_one_batched",
           f'name: "add_one_batched"\nbackend: "python"\nmax_batch_size: 8\n{io}{one}dynamic_batching {{ }}\n',
           (BENCH_MODELS / "add_one.py").read_text(encoding="utf-8"))
    _model(root, "refuse_negative", f'name: "refuse_negative"\nbackend: "python"\nmax_batch_size: 0\n{io}{one}',
           _REFUSE_NEGATIVE)
    _model(root, "guarded", (
        f'name: "guarded"\nplatform: "ensemble"\nmax_batch_size: 0\n'
        f'input [ {{ name: "IN" {TENSOR} }} ]\noutput [ {{ name: "OUT" {TENSOR} }} ]\n'
        'ensemble_scheduling { step [\n'
        '  { model_name: "add_one_0" model_version: -1 input_map { key: "X" value: "IN" } '
        'output_map { key: "Y" value: "mid" } },\n'
        '  { model_name: "refuse_negative" model_version: -1 input_map { key: "X" value: "mid" } '
        'output_map { key: "Y" value: "OUT" } }\n] }\n'
    ))
