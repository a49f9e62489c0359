"""A request the data plane admitted: what its model gets, and how its response and its statistics follow from it.

Pure but for the statistics it counts (each on the loop, or where the caller says): `DataPlane` admits a request
and runs it; its response (`respond`, any thread) and its counts are this module's."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from ensemble_runtime import classification
from ensemble_runtime.errors import ResponseError, failure_reason, internal, quote_name
from ensemble_runtime.inference import BackendRequest, BackendResult, InferResponse, Tensor, batch_size_of
from ensemble_runtime.registry import LoadedVersion
from ensemble_runtime.stats import ComputeTimes

Parameters = dict[str, bool | int | float | str]


@dataclass(frozen=True, slots=True)
class Admitted:
    """A request the data plane checked, on its way to a model: what its statistics and its response need."""

    lv: LoadedVersion
    request: BackendRequest  # what the model gets: requested_outputs are the outputs the response carries
    classes: dict[str, int]  # output -> class count, where the client asked for classification
    model_name: str
    request_id: str
    start_ns: int

    def respond(self, outputs: Mapping[str, Tensor], parameters: Parameters) -> InferResponse:
        """The response from what its model produced (pure: any thread)."""
        requested = self.request.requested_outputs
        try:  # (what a model made is most often what was asked, in order: a copy then, without a comprehension)
            selected = dict(outputs) if tuple(outputs) == requested else {n: outputs[n] for n in requested}
        except KeyError:
            missing = [n for n in requested if n not in outputs]
            raise internal(
                f"model {quote_name(self.model_name)} did not produce requested output(s) {missing}"
            ) from None
        if self.classes:
            selected = classification.apply(selected, self.classes, self.lv.config.max_batch_size > 0, self.lv.labels)
        return InferResponse(
            model_name=self.model_name,
            model_version=str(self.lv.version),
            outputs=selected,
            id=self.request_id,
            parameters=parameters,
        )

    def outcome(self, result: BackendResult, parameters: Parameters) -> InferResponse | Exception:
        """What a request taken without a task answers: its response, or the error (pure: any thread)."""
        if isinstance(result, Exception):
            return result
        if isinstance(result, BaseException):  # kept from the loop: the request fails, the server goes on
            return internal(f"model '{self.lv.model}': execution raised {result!r}")
        try:
            return self.respond(result, parameters)
        except Exception as exc:  # the answer carries it; the request is settled all the same
            return exc

    def count_success(self, end: int) -> None:
        stats = self.lv.stats
        success = stats.success
        success.count += 1
        success.ns += end - self.start_ns
        stats.last_inference_ms = int(time.time() * 1000)

    def count_failure(self, exc: BaseException, end: int, ensemble: bool) -> None:
        """The model's own error response is a success of the model, never of an ensemble (`ensemble`: the
        request's model is one)."""
        if isinstance(exc, ResponseError) and not ensemble:
            self.lv.stats.success.add(end - self.start_ns)
        else:
            self.lv.stats.record_failure(end - self.start_ns, failure_reason(exc, ensemble))

    def count_ensemble(self, queued: int, compute: ComputeTimes) -> None:
        """An ensemble request's own statistics: one execution, its steps' compute summed."""
        batch = batch_size_of(self.request.inputs) if self.lv.config.max_batch_size else 1
        self.lv.stats.record_alone(batch, queued - self.start_ns, compute, int(time.time() * 1000))
