"""Client-side helpers shared by the ensemble integration tests."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio

Client = grpcclient.InferenceServerClient | grpcaio.InferenceServerClient


def fp32_input(name: str, array: npt.NDArray[Any]) -> grpcclient.InferInput:
    item = grpcclient.InferInput(name, list(array.shape), "FP32")
    item.set_data_from_numpy(array.astype(np.float32))
    return item


def x_rows(*rows: float) -> npt.NDArray[np.float32]:
    """A [len(rows), 4] batch whose row i is filled with rows[i] (plus 0..3, so positions differ)."""
    return np.array([[r + i for i in range(4)] for r in rows], np.float32)


def outputs(*names: str) -> list[grpcclient.InferRequestedOutput]:
    return [grpcclient.InferRequestedOutput(n) for n in names]


def ensemble_versions(result: grpcclient.InferResult) -> str:
    return str(result.get_response().parameters["ensemble_versions"].string_param)


def model_stats(client: grpcclient.InferenceServerClient, model: str) -> dict[str, int]:
    """Counters of a model summed over its served versions: successes, failures, inferences, executions."""
    totals = {"success": 0, "fail": 0, "inference_count": 0, "execution_count": 0}
    for entry in client.get_inference_statistics(model, as_json=True)["model_stats"]:
        stats = entry.get("inference_stats", {})
        totals["success"] += int(stats.get("success", {}).get("count", 0))
        totals["fail"] += int(stats.get("fail", {}).get("count", 0))
        totals["inference_count"] += int(entry.get("inference_count", 0))
        totals["execution_count"] += int(entry.get("execution_count", 0))
    return totals


def batch_sizes(client: grpcclient.InferenceServerClient, model: str) -> dict[int, int]:
    """batch size -> executions of that size, from the model's batch_stats."""
    sizes: dict[int, int] = {}
    for entry in client.get_inference_statistics(model, as_json=True)["model_stats"]:
        for stat in entry.get("batch_stats", []):
            count = int(stat.get("compute_infer", {}).get("count", 0))
            sizes[int(stat["batch_size"])] = sizes.get(int(stat["batch_size"]), 0) + count
    return sizes


def index(client: grpcclient.InferenceServerClient) -> list[dict[str, str]]:
    models: list[dict[str, str]] = client.get_model_repository_index(as_json=True)["models"]
    return models
