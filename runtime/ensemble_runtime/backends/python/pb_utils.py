"""The `triton_python_backend_utils` API that Triton's `model.py` files use, implemented in process.

Names, signatures and semantics follow Triton's python_backend; what this runtime cannot offer (decoupled
response senders, GPU tensors) raises `TritonModelException` saying so.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ensemble_runtime.backends.python import bls
from ensemble_runtime.backends.python.auto_complete import ModelConfig
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
    error_code_of,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_string_to_numpy,
    triton_to_numpy_type,
)
from ensemble_runtime.errors import InferenceError
from ensemble_runtime.inference import InferRequest, InferResponse, ParamValue

__all__ = [
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
    "ModelConfig",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "error_code_of",
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
        self._parameters = _parameters_dict(parameters)

    def output_tensors(self) -> list[Tensor]:
        return self._tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return json.dumps(self._parameters)


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
        self._parameters = _parameters_dict(parameters)

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
        return json.dumps(self._parameters)

    def is_cancelled(self) -> bool:
        return False

    def get_response_sender(self) -> Any:
        raise TritonModelException(
            "get_response_sender() is for decoupled models; this runtime serves Python models in "
            "non-decoupled mode only: return one InferenceResponse per request from execute()"
        )

    def exec(self, decoupled: bool = False) -> InferenceResponse:
        """Run this request on another model of this server and wait (from a synchronous `execute`)."""
        target = bls.current_target()
        self._refuse_decoupled(decoupled)
        return bls.run_sync(target, self._call(target))

    async def async_exec(self, decoupled: bool = False) -> InferenceResponse:
        """Run this request on another model of this server (from an `async def execute`)."""
        target = bls.current_target()
        self._refuse_decoupled(decoupled)
        if asyncio.get_running_loop() is target.loop:
            return await self._call(target)
        future = asyncio.run_coroutine_threadsafe(self._call(target), target.loop)
        return await asyncio.wrap_future(future)

    def _refuse_decoupled(self, decoupled: bool) -> None:
        if decoupled:
            raise TritonModelException("decoupled BLS calls (exec(decoupled=True)) are not supported")
        if not self._model_name:
            raise TritonModelException("a BLS InferenceRequest needs model_name")

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
            return InferenceResponse(
                error=TritonError(exc.message, ERROR_TO_TRITON.get(exc.code, TritonError.INTERNAL))
            )
        except Exception as exc:
            return InferenceResponse(error=TritonError(f"{type(exc).__name__}: {exc}", TritonError.INTERNAL))
        return _from_infer_response(response)


def _from_infer_response(response: InferResponse) -> InferenceResponse:
    tensors = [Tensor(name, array) for name, array in response.outputs.items()]
    return InferenceResponse(output_tensors=tensors, parameters=dict(response.parameters))


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    return _by_name(inference_request.inputs(), name)


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
