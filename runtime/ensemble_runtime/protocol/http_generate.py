"""Triton's generate extension (`POST /v2/models/{m}[/versions/{v}]/generate` and `.../generate_stream`): one flat
JSON object in, one flat JSON object out per response, for text-oriented models such as LLMs. Pure: the body <->
the data plane's request and responses; http_server answers the routes.

As tritonserver does (checked against 2.51 side by side): each top-level key that names one of the model's inputs
is that input, its datatype and shape taken from the model's config (a scalar is one element, an array its elements
in order; a dimension of -1 takes what the count leaves; a batching model gets a batch of one); `parameters` holds
request parameters, and every other key is a request parameter too, `id` also the request's id. A response is
`model_name`, `model_version` (and `id` when the request had one), then each output by name: one element as a
scalar, more as a flat array, BYTES as text. Where Triton answers a client's mistake with 500 (a value of the wrong
type, a body that is not an object), this answers 400, as its infer endpoint does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ensemble_runtime.dtypes import numpy_to_wire
from ensemble_runtime.errors import invalid, quote_name
from ensemble_runtime.inference import InferRequest, InferResponse, ParamValue, Tensor
from ensemble_runtime.protocol.http_codec import dumps, json_data, json_parameters, parse_json, tensor_from_json
from ensemble_runtime.validation import ModelSignature, TensorSpec

# tritonserver's messages, so that clients written against it read the same
ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model that generates various "
    "number of responses"
)
SSE_CONTENT = "text/event-stream; charset=utf-8"
_REMEDY = "use the infer endpoint with binary data for it"
_PARAMETER_TYPES = (int, float, str)


def decode_generate(
    raw: bytes | bytearray, sig: ModelSignature, model: str, version: str
) -> tuple[InferRequest, dict[str, str]]:
    """A generate request's body (JSON bytes) -> (request, each input's datatype)."""
    return generate_request(parse_json(raw, f"the generate request for {quote_name(model)}"), sig, model, version)


def generate_request(
    body: Mapping[str, Any], sig: ModelSignature, model: str, version: str
) -> tuple[InferRequest, dict[str, str]]:
    """The generate request `body` (a JSON object) for the model of `sig` -> (request, each input's datatype)."""
    inputs: dict[str, Tensor] = {}
    declared: dict[str, str] = {}
    parameters: dict[str, ParamValue] = {}
    for key, value in body.items():
        spec = sig.inputs.get(key)
        if spec is not None:
            shape = _shape(spec, sig.max_batch_size, value)
            inputs[key] = tensor_from_json(key, spec.wire_type, shape, value if isinstance(value, list) else [value])
            declared[key] = spec.wire_type
        elif key == "parameters":
            parameters.update(json_parameters(value, "the request"))
        elif isinstance(value, _PARAMETER_TYPES):  # bool is an int
            parameters[key] = value
        else:
            raise invalid(
                f"{quote_name(key)} is not an input of model {quote_name(model)}, and as a request parameter it "
                "must be a string, number or boolean"
            )
    request_id = body.get("id", "")
    if "id" not in sig.inputs and not isinstance(request_id, str):
        raise invalid("'id' of the generate request must be a string")
    return InferRequest(model, version, inputs, [], request_id if isinstance(request_id, str) else "", parameters), declared


def _shape(spec: TensorSpec, max_batch_size: int, value: object) -> tuple[int, ...]:
    """The config's dims for `value`'s element count (an array's length; a scalar is one): a -1 takes what the
    fixed dims leave (further -1s take 1); a batching model's batch of one in front."""
    count = len(value) if isinstance(value, list) else 1
    dims = list(spec.dims)
    fixed = 1
    for d in dims:
        fixed *= d if d >= 0 else 1
    if -1 in dims and fixed and count % fixed == 0:
        first = dims.index(-1)
        dims = [1 if d < 0 else d for d in dims]
        dims[first] = count // fixed
    elif -1 in dims or fixed != count:
        raise invalid(f"The schema can not convert input {quote_name(spec.name)} to tensor with proper shape")
    return (1, *dims) if max_batch_size > 0 else tuple(dims)


def encode_generate(response: InferResponse) -> bytes:
    """One response as the generate endpoints write it, as JSON bytes."""
    return dumps(generate_response(response))


def generate_response(response: InferResponse) -> dict[str, Any]:
    """One response as the generate endpoints write it."""
    out: dict[str, Any] = {"id": response.id} if response.id else {}
    out["model_name"] = response.model_name
    out["model_version"] = response.model_version
    for name in sorted(response.outputs):
        array = response.outputs[name]
        values = json_data(name, numpy_to_wire(array.dtype), array, _REMEDY)
        out[name] = values[0] if len(values) == 1 else values
    return out
