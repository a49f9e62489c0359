"""Triton's classification extension: an output requested with a class count becomes its top-k classes. Pure.

A client asks for it per requested output (gRPC output parameter `classification`, an int64; HTTP output
parameter `classification`, an integer). The output is then sent as BYTES: per batch entry (when the model
batches, the first dimension) the `k = min(count, elements)` largest elements, largest first, each as
`"<value>:<index>"`, plus `":<label>"` when the output's `label_filename` has a non-empty line for that index.
Values are written as C++'s `std::to_string` writes them (floats with six decimals, integers as they are), so
the strings are the ones Triton sends. Only numeric outputs can be classified (not BYTES, BOOL or FP16, as in
Triton); a count of 0 means no classification.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ensemble_runtime.errors import invalid, quote_name
from ensemble_runtime.inference import ParamValue, Tensor

PARAMETER = "classification"
_CLASSIFIABLE = {
    np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int16, np.int32, np.int64,
                          np.float32, np.float64)
}
_WIRE = {np.dtype(np.bool_): "BOOL", np.dtype(np.float16): "FP16", np.dtype(np.object_): "BYTES"}


def class_counts(output_parameters: Mapping[str, Mapping[str, ParamValue]]) -> dict[str, int]:
    """Output name -> requested class count, for the outputs that ask for classification (count > 0)."""
    counts: dict[str, int] = {}
    for name, params in output_parameters.items():
        if PARAMETER not in params:
            continue
        value = params[PARAMETER]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise invalid(
                f"output {quote_name(name)}: the '{PARAMETER}' parameter must be a non-negative integer "
                f"(the number of classes to return), got {value!r}"
            )
        if value > 0:
            counts[name] = value
    return counts


def _text(value: object, floating: bool) -> str:
    return f"{value:f}" if floating else str(int(value))  # type: ignore[call-overload]


def top_k(values: Tensor, count: int, labels: Sequence[str]) -> list[bytes]:
    """The `count` largest of a flat array as Triton's `value:index[:label]` strings, largest first."""
    k = min(count, values.size)
    if k == 0:
        return []
    floating = values.dtype.kind == "f"
    # largest first, ties by index (Triton's sort leaves ties unordered); 64-bit integers compare as doubles
    order = np.lexsort((np.arange(values.size), -values.astype(np.float64)))
    out: list[bytes] = []
    for index in order[:k].tolist():
        text = f"{_text(values[index], floating)}:{index}"
        label = labels[index] if index < len(labels) else ""
        if label:
            text += f":{label}"
        out.append(text.encode("utf-8"))
    return out


def classify(name: str, array: Tensor, count: int, batched: bool, labels: Sequence[str]) -> Tensor:
    """`array` (one output of a response) -> its classification, a BYTES array [batch, k] or [k]."""
    if array.dtype not in _CLASSIFIABLE:
        wire = _WIRE.get(array.dtype, str(array.dtype).upper())
        raise invalid(
            f"output {quote_name(name)}: class result not available for output due to unsupported type '{wire}'"
        )
    per_entry = batched and array.ndim > 0
    rows = [array[i].reshape(-1) for i in range(array.shape[0])] if per_entry else [array.reshape(-1)]
    results = [top_k(row, count, labels) for row in rows]
    width = min(count, int(np.prod(array.shape[1:])) if per_entry else array.size)
    out = np.empty((len(rows), width), dtype=np.object_)
    for i, row in enumerate(results):
        out[i, : len(row)] = row
    return out if per_entry else out.reshape(width)


def apply(
    outputs: Mapping[str, Tensor], counts: Mapping[str, int], batched: bool, labels: Mapping[str, Sequence[str]]
) -> dict[str, Tensor]:
    """The response's outputs with each one named in `counts` replaced by its classification."""
    return {
        name: classify(name, array, counts[name], batched, labels.get(name, ())) if name in counts else array
        for name, array in outputs.items()
    }
