"""The tritonclient stream API as the tests use it: send requests on one stream, read what comes back."""

from __future__ import annotations

import queue
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

MODELS_DIR = "models"
DEADLINE_S = 60.0  # generous: a busy 2-core machine


@dataclass(frozen=True)
class Message:
    """One stream callback: a response (id, outputs, the final flag) or an error."""

    id: str
    outputs: dict[str, list[Any]]
    final: bool | None  # the triton_final_response parameter (None: absent)
    error: str | None = None
    parameters: dict[str, Any] | None = None


def tensor(name: str, value: np.ndarray[Any, Any], datatype: str) -> grpcclient.InferInput:
    t = grpcclient.InferInput(name, list(value.shape), datatype)
    t.set_data_from_numpy(value)
    return t


def repeat_inputs(values: list[int], delay_ms: int = 0, wait_ms: int = 0) -> list[grpcclient.InferInput]:
    return [
        tensor("IN", np.array(values, np.int32), "INT32"),
        tensor("DELAY", np.full(len(values), delay_ms, np.uint32), "UINT32"),
        tensor("WAIT", np.array([wait_ms], np.uint32), "UINT32"),
    ]


def to_message(result: grpcclient.InferResult | None, error: InferenceServerException | None) -> Message:
    if error is not None:
        return Message(id="", outputs={}, final=None, error=str(error.message()))
    assert result is not None
    response = result.get_response()
    outputs = {o.name: result.as_numpy(o.name).tolist() for o in response.outputs}
    params = {key: getattr(value, value.WhichOneof("parameter_choice")) for key, value in response.parameters.items()}
    return Message(id=response.id, outputs=outputs, final=params.get("triton_final_response"), parameters=params)


class Stream:
    """One `start_stream` of a sync gRPC client; `next()` is the next callback, waited for with a deadline."""

    def __init__(self, url: str) -> None:
        self.client = grpcclient.InferenceServerClient(url)
        self._messages: queue.Queue[Message] = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self._messages.put(to_message(result, error)))

    def send(self, model: str, inputs: list[grpcclient.InferInput], request_id: str, *, empty_final: bool = False,
             outputs: list[str] | None = None) -> None:
        requested = [grpcclient.InferRequestedOutput(name) for name in outputs] if outputs else None
        self.client.async_stream_infer(model, inputs, request_id=request_id, outputs=requested,
                                       enable_empty_final_response=empty_final)

    def next(self) -> Message:
        return self._messages.get(timeout=DEADLINE_S)

    def until_final(self) -> list[Message]:
        """Messages up to the first with the final flag or an error (the request's end)."""
        got = []
        while True:
            message = self.next()
            got.append(message)
            if message.error is not None or message.final:
                return got

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.client.stop_stream()
        self.client.close()
