"""The `triton_python_backend_utils` API that Triton's `model.py` files use, implemented in process.

Names, signatures and semantics follow Triton's python_backend; what this runtime cannot offer (GPU tensors)
raises `TritonModelException` saying so. Decoupled models: `backends/python/decoupled.py`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import Any

from ensemble_runtime.backends.python import bls
from ensemble_runtime.backends.python.auto_complete import ModelConfig
from ensemble_runtime.backends.python.pb_metrics import COUNTER, GAUGE, HISTOGRAM, Metric, MetricFamily
from ensemble_runtime.backends.python.pb_types import (
    ERROR_TO_TRITON,
    TRITON_STRING_TO_NUMPY,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    Logger,
    LogLevel,
    Tensor,
    TritonError,
    TritonModelException,
    deserialize_bytes_tensor,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_string_to_numpy,
    triton_to_numpy_type,
)
from ensemble_runtime.custom_metrics import MetricKind
from ensemble_runtime.errors import InferenceError
from ensemble_runtime.inference import InferRequest, InferResponse, ParamValue

__all__ = [
    "COUNTER",
    "GAUGE",
    "HISTOGRAM",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "InferenceRequest",
    "InferenceResponse",
    "LogLevel",
    "Logger",
    "Metric",
    "MetricFamily",
    "MetricKind",
    "ModelConfig",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "using_decoupled_model_transaction_policy",
]


def _parameters_dict(parameters: Mapping[str, Any] | str | None) -> dict[str, ParamValue]:
    if parameters is None or parameters == "":
        return {}
    if isinstance(parameters, str):
        try:
            parsed = json.loads(parameters)
        except json.JSONDecodeError as exc:
            raise TritonModelException(f"request parameters are not valid JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise TritonModelException("request parameters must be a JSON object")
        parameters = parsed
    out: dict[str, ParamValue] = {}
    for key, value in parameters.items():
        if not isinstance(value, bool | int | float | str):
            raise TritonModelException(
                f"request parameter '{key}' has type {type(value).__name__}; expected bool, int, float or str"
            )
        out[str(key)] = value
    return out


class InferenceResponse:
    """A model's answer to one request: output tensors, or an error."""

    def __init__(
        self,
        output_tensors: Sequence[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: Mapping[str, Any] | str | None = None,
    ) -> None:
        tensors = list(output_tensors or [])
        for tensor in tensors:
            if not isinstance(tensor, Tensor):
                raise TritonModelException(
                    f"InferenceResponse output_tensors must be pb_utils.Tensor objects, got {type(tensor).__name__}"
                )
        self._tensors = tensors
        self._error = error
        self._parameters = _parameters_dict(parameters) if parameters else {}  # (none: no call per response)

    def output_tensors(self) -> list[Tensor]:
        return self._tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return json.dumps(self._parameters, separators=(",", ":"))  # compact, as the stub writes it


class InferenceRequest:
    """Both the request `execute` receives and a BLS request to another model of this server."""

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: Sequence[Tensor] = (),
        requested_output_names: Sequence[str] = (),
        model_name: str = "",
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: Any = None,
        trace: Any = None,
        parameters: Mapping[str, Any] | str | None = None,
    ) -> None:
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._inputs = list(inputs)
        self._requested = list(requested_output_names)
        self._model_name = model_name
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        self._parameters = _parameters_dict(parameters) if parameters else {}  # (none: no call per request)
        self._response_sender: Any = None

    def attach_response_sender(self, sender: Any) -> None:
        """Set by the runtime on the requests a decoupled model's `execute` receives."""
        self._response_sender = sender

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return self._requested

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        return json.dumps(self._parameters, separators=(",", ":"))  # compact, as the stub writes it

    def is_cancelled(self) -> bool:
        return False

    def get_response_sender(self) -> Any:
        if self._response_sender is None:
            raise TritonModelException(
                "get_response_sender() is for the requests a decoupled model receives (set "
                "model_transaction_policy { decoupled: true }); otherwise return one InferenceResponse per "
                "request from execute()"
            )
        return self._response_sender

    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on another model of this server and wait (from a synchronous `execute`).
        `decoupled=True`: a generator of every response the model sends, an empty one for a final flag sent
        alone, each fetched as the loop over it asks."""
        target = bls.current_target()
        self._check_target()
        if decoupled:
            return bls.iterate_sync(target, self._stream(target))
        return bls.run_sync(target, self._call(target))

    async def async_exec(self, decoupled: bool = False) -> Any:
        """Run this request on another model of this server (from an `async def execute`).
        `decoupled=True`: the responses (as `exec(decoupled=True)` yields them), collected until the final
        one, so that iterating over them never blocks the event loop; `for` and `async for` both work."""
        target = bls.current_target()
        self._check_target()
        if decoupled:
            return _Responses(await self._on_loop(target, self._collect(target)))
        return await self._on_loop(target, self._call(target))

    @staticmethod
    async def _on_loop(target: bls.BlsTarget, coroutine: Any) -> Any:
        if asyncio.get_running_loop() is target.loop:
            return await coroutine
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, target.loop))

    def _check_target(self) -> None:
        if not self._model_name:
            raise TritonModelException("a BLS InferenceRequest needs model_name")

    async def _collect(self, target: bls.BlsTarget) -> list[InferenceResponse]:
        return [response async for response in self._stream(target)]

    async def _stream(self, target: bls.BlsTarget) -> AsyncIterator[InferenceResponse]:
        if target.stream_caller is None:
            yield InferenceResponse(error=TritonError("decoupled BLS calls are not available here",
                                                      TritonError.UNSUPPORTED))
            return
        try:
            async for item in target.stream_caller(self.to_infer_request()):
                if item.error is not None:
                    yield _error_response(item.error)
                elif item.response is not None:
                    yield _from_infer_response(item.response)
                else:  # the final flag alone: Triton's iterator ends with an empty response
                    yield InferenceResponse()
        except InferenceError as exc:
            yield _error_response(exc)
        except Exception as exc:
            yield InferenceResponse(error=TritonError(f"{type(exc).__name__}: {exc}", TritonError.INTERNAL))

    def to_infer_request(self) -> InferRequest:
        parameters = dict(self._parameters)
        if self._correlation_id not in (0, ""):  # a BLS call inside a sequence: as the client would send it
            parameters["sequence_id"] = self._correlation_id
            parameters["sequence_start"] = bool(self._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_START)
            parameters["sequence_end"] = bool(self._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_END)
        return InferRequest(
            model_name=self._model_name,
            model_version="" if self._model_version < 0 else str(self._model_version),
            inputs={tensor.name(): tensor.as_numpy() for tensor in self._inputs},
            requested_outputs=list(self._requested),
            id=self._request_id,
            parameters=parameters,
        )

    async def _call(self, target: bls.BlsTarget) -> InferenceResponse:
        try:
            response = await target.caller(self.to_infer_request())
        except InferenceError as exc:
            return _error_response(exc)
        except Exception as exc:
            return InferenceResponse(error=TritonError(f"{type(exc).__name__}: {exc}", TritonError.INTERNAL))
        return _from_infer_response(response)


class _Responses:
    """The responses `async_exec(decoupled=True)` returns: iterable with `for` and with `async for`."""

    def __init__(self, responses: list[InferenceResponse]) -> None:
        self._responses = responses

    def __iter__(self) -> Iterator[InferenceResponse]:
        return iter(self._responses)

    async def __aiter__(self) -> AsyncIterator[InferenceResponse]:
        for response in self._responses:
            yield response

    def __len__(self) -> int:
        return len(self._responses)


def _error_response(exc: InferenceError) -> InferenceResponse:
    return InferenceResponse(error=TritonError(exc.message, ERROR_TO_TRITON.get(exc.code, TritonError.INTERNAL)))


def _from_infer_response(response: InferResponse) -> InferenceResponse:
    tensors = [Tensor(name, array) for name, array in response.outputs.items()]
    return InferenceResponse(output_tensors=tensors, parameters=dict(response.parameters))


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    for tensor in inference_request.inputs():  # (`_by_name` inline: called per request by most models)
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    return _by_name(inference_response.output_tensors(), name)


def _by_name(tensors: Iterable[Tensor], name: str) -> Tensor | None:
    for tensor in tensors:
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    return _config_entry(model_config, "input", name)


def get_output_config_by_name(model_config: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    return _config_entry(model_config, "output", name)


def _config_entry(model_config: Mapping[str, Any], kind: str, name: str) -> dict[str, Any] | None:
    for entry in model_config.get(kind, []):
        if entry.get("name") == name:
            return dict(entry) if not isinstance(entry, dict) else entry
    return None


def using_decoupled_model_transaction_policy(model_config: Mapping[str, Any]) -> bool:
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))
