"""What an instance's `execute` call comes to: one result per request, whatever the backend did.

A backend bug (an exception, or a wrong number of responses) fails the call's requests, never the worker or the
loop; SystemExit and the like from a model must not reach the loop either (they would end the server)."""

from __future__ import annotations

from collections.abc import Awaitable

from ensemble_runtime.errors import internal, must_propagate
from ensemble_runtime.inference import BackendResult


async def execution_results(model: str, execution: Awaitable[list[BackendResult]], count: int) -> list[BackendResult]:
    """One result per request of an `execute` call (`count` of them): the instance's, or the error that stands
    for it when the backend fails."""
    try:
        results = await execution
    except BaseException as exc:
        return failed_results(model, exc, count)
    return counted_results(model, results, count)


def failed_results(model: str, exc: BaseException, count: int) -> list[BackendResult]:
    """What stands for `count` results when an execution raised: the exception itself, or an internal error
    naming what the model raised where that was not an Exception (what must propagate, propagates)."""
    if isinstance(exc, Exception):
        return [exc] * count
    if must_propagate(exc):
        raise exc
    return [internal(f"model '{model}': execution raised {exc!r}")] * count


def counted_results(model: str, results: list[BackendResult], count: int) -> list[BackendResult]:
    """`results` where there is one per request; otherwise an internal error for each."""
    if len(results) != count:
        return [internal(f"model '{model}' returned {len(results)} responses for {count} requests")] * count
    return results
