"""Ensemble graphs end to end: fan-out/fan-in, output subsets, validation errors, failing steps, batching."""

from __future__ import annotations

import asyncio
import itertools

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from tests.integration.ensembles import repo
from tests.integration.ensembles.support import batch_sizes, fp32_input, index, model_stats, outputs, x_rows
from tests.support.runtime_process import RuntimeProcess


def test_fan_out_fan_in(server: RuntimeProcess) -> None:
    x = x_rows(1.0, -3.5, 100.0)
    with server.grpc_client() as client:
        result = client.infer("fan", [fp32_input("X", x)])
        # doubled = 2x and shifted = x + 10 run in parallel; combine adds and subtracts them
        np.testing.assert_allclose(result.as_numpy("sum"), 2 * x + (x + 10))
        np.testing.assert_allclose(result.as_numpy("diff"), 2 * x - (x + 10))
        assert result.as_numpy("sum").shape == (3, 4)
        assert result.get_response().model_name == "fan"
        versions = result.get_response().parameters["ensemble_versions"].string_param
        assert versions == "combine:1,plus10:1,times2:1"


SUBSET_STEPS = {"a_out": {"sub_a"}, "b_out": {"sub_b"}, "total": {"sub_a", "sub_b", "sub_c"}}
ALL_SUBSETS = [s for n in range(1, 4) for s in itertools.combinations(sorted(SUBSET_STEPS), n)]


@pytest.mark.parametrize("requested", ALL_SUBSETS, ids=["+".join(s) for s in ALL_SUBSETS])
def test_output_subsets_run_only_the_needed_steps(server: RuntimeProcess, requested: tuple[str, ...]) -> None:
    x = x_rows(2.0, 5.0)
    expected = {"a_out": 2 * x, "b_out": x + 10, "total": 2 * x + x + 10}
    needed = set().union(*(SUBSET_STEPS[name] for name in requested))
    with server.grpc_client() as client:
        before = {m: model_stats(client, m) for m in ("sub_a", "sub_b", "sub_c")}
        result = client.infer("subsets", [fp32_input("X", x)], outputs=outputs(*requested))
        after = {m: model_stats(client, m) for m in ("sub_a", "sub_b", "sub_c")}
    for name in SUBSET_STEPS:
        if name in requested:
            np.testing.assert_allclose(result.as_numpy(name), expected[name])
        else:
            assert result.as_numpy(name) is None, f"{name} was not requested but came back"
    for model in ("sub_a", "sub_b", "sub_c"):
        ran = after[model]["success"] - before[model]["success"]
        inferences = after[model]["inference_count"] - before[model]["inference_count"]
        if model in needed:
            assert (ran, inferences) == (1, 2), (model, before[model], after[model])
        else:
            assert after[model] == before[model], f"{model} ran although {requested} does not need it"


@pytest.mark.parametrize("name", sorted(repo.BROKEN))
def test_each_validation_error_is_reported_and_good_ensembles_serve(server: RuntimeProcess, name: str) -> None:
    x = x_rows(1.0)
    with server.grpc_client() as client:
        entries = [m for m in index(client) if m["name"] == name]
        assert len(entries) == 1, entries
        assert entries[0]["state"] == "UNAVAILABLE", entries
        reason = entries[0]["reason"]
        assert f"ensemble '{name}'" in reason, reason
        for part in repo.BROKEN[name]:
            assert part in reason, (part, reason)
        assert not client.is_model_ready(name)

        with pytest.raises(InferenceServerException) as refused:
            client.infer(name, [fp32_input("IN", x)])
        # as Triton answers a model with no loaded version: NOT_FOUND "... has no available versions"
        assert refused.value.status() == "StatusCode.NOT_FOUND", refused.value
        assert "has no available versions" in refused.value.message(), refused.value
        # loading it again through the repository API reports the same validation error
        with pytest.raises(InferenceServerException) as load_error:
            client.load_model(name)
        for part in repo.BROKEN[name]:
            assert part in load_error.value.message(), (part, load_error.value.message())

        # the good ensembles next to it, over the same step models, keep serving
        assert {e["name"] for e in index(client) if e.get("state") == "READY"} >= set(repo.GOOD_ENSEMBLES)
        fan = client.infer("fan", [fp32_input("X", x)])
        np.testing.assert_allclose(fan.as_numpy("sum"), 3 * x + 10)


def test_failing_step_fails_only_its_request(server: RuntimeProcess) -> None:
    async def run() -> tuple[BaseException | grpcclient.InferResult, ...]:
        async with grpcaio.InferenceServerClient(server.grpc_url) as client:
            calls = [
                client.infer("fail_chain", [fp32_input("X", np.array([value], np.float32))])
                for value in (-1.0, 16.0, -2.0, 25.0)
            ]
            return tuple(await asyncio.gather(*calls, return_exceptions=True))

    bad_1, good_16, bad_2, good_25 = asyncio.run(run())
    for bad, value in ((bad_1, -1.0), (bad_2, -2.0)):
        assert isinstance(bad, InferenceServerException), bad
        message = bad.message()
        assert "ensemble 'fail_chain' step 0 (model 'py_check'" in message, message
        assert f"negative input {value} is not allowed" in message, message
    for good, root in ((good_16, 4.0), (good_25, 5.0)):
        assert isinstance(good, grpcclient.InferResult), good
        np.testing.assert_allclose(good.as_numpy("Y"), [root])


def test_dynamic_batching_across_concurrent_ensemble_requests(server: RuntimeProcess) -> None:
    count = 8

    async def run() -> list[grpcclient.InferResult]:
        async with grpcaio.InferenceServerClient(server.grpc_url) as client:
            calls = [client.infer("batch_ens", [fp32_input("X", x_rows(float(i)))]) for i in range(count)]
            return list(await asyncio.gather(*calls))

    with server.grpc_client() as client:
        before = model_stats(client, "batched")
        results = asyncio.run(run())
        after = model_stats(client, "batched")
        sizes = batch_sizes(client, "batched")
    for i, result in enumerate(results):
        np.testing.assert_allclose(result.as_numpy("y"), 3 * x_rows(float(i)))
    inferences = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferences == count, (before, after)
    assert executions < inferences, f"no batch formed: {executions} executions for {inferences} inferences"
    assert any(size > 1 and n > 0 for size, n in sizes.items()), sizes
