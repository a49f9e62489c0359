"""What an instance's execute call comes to: one result per request, whatever the backend returned or raised."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from ensemble_runtime.errors import ErrorCode, InferenceError
from ensemble_runtime.executions import counted_results, execution_results, failed_results
from ensemble_runtime.inference import BackendResult


async def returning(results: list[BackendResult]) -> list[BackendResult]:
    return results


async def raising(exc: BaseException) -> list[BackendResult]:
    raise exc


def test_results_pass_through_when_there_is_one_per_request() -> None:
    results: list[BackendResult] = [{"y": np.ones(2)}, ValueError("bad")]
    assert asyncio.run(execution_results("m", returning(results), 2)) is results


def test_a_wrong_number_of_responses_fails_every_request_naming_the_model() -> None:
    results = counted_results("m", [{"y": np.ones(2)}], 3)
    assert len(results) == 3
    for result in results:
        assert isinstance(result, InferenceError)
        assert result.code == ErrorCode.INTERNAL
        assert "model 'm' returned 1 responses for 3 requests" in str(result)


def test_an_exception_stands_for_each_request() -> None:
    exc = ValueError("broken backend")
    assert asyncio.run(execution_results("m", raising(exc), 2)) == [exc, exc]


@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt()])
def test_what_would_end_the_server_becomes_an_internal_error(exc: BaseException) -> None:
    results = asyncio.run(execution_results("m", raising(exc), 1))
    assert isinstance(results[0], InferenceError)
    assert results[0].code == ErrorCode.INTERNAL
    assert f"model 'm': execution raised {exc!r}" in str(results[0])


@pytest.mark.parametrize("exc", [asyncio.CancelledError(), GeneratorExit()])
def test_a_cancellation_or_a_closed_generator_passes_on(exc: BaseException) -> None:
    with pytest.raises(type(exc)):
        failed_results("m", exc, 1)
