"""Type stub for the native protocol core (runtime/native, Rust; built into this package by setuptools-rust)."""

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, final

from numpy.typing import NDArray

from ensemble_runtime.inference import InferResponse

ParamValue = bool | int | float | str
OutputPayload = tuple[str, str, tuple[int, ...], bytes | NDArray[Any]]  # data: C-contiguous bytes
ON_LOOP: bool  # whether a core can have no threads (0), driven by the event loop's thread: a tokio_unstable build

@final
class WireBuffer:
    """Read-only bytes of a received message; numpy reads them in place (buffer protocol)."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class Contents:
    @property
    def bool_contents(self) -> list[bool]: ...
    @property
    def int_contents(self) -> list[int]: ...
    @property
    def int64_contents(self) -> list[int]: ...
    @property
    def uint_contents(self) -> list[int]: ...
    @property
    def uint64_contents(self) -> list[int]: ...
    @property
    def fp32_contents(self) -> list[float]: ...
    @property
    def fp64_contents(self) -> list[float]: ...
    @property
    def bytes_contents(self) -> list[bytes]: ...

@final
class InputTensor:
    @property
    def name(self) -> str: ...
    @property
    def datatype(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def parameters(self) -> dict[str, ParamValue]: ...
    @property
    def contents(self) -> Contents: ...
    @property
    def has_contents(self) -> bool: ...
    def HasField(self, field: str) -> bool: ...

@final
class OutputTensor:
    @property
    def name(self) -> str: ...
    @property
    def parameters(self) -> dict[str, ParamValue]: ...

@final
class InferRequestView:
    """A decoded ModelInferRequest: the attributes grpc_codec.decode_request reads."""

    @property
    def model_name(self) -> str: ...
    @property
    def model_version(self) -> str: ...
    @property
    def id(self) -> str: ...
    @property
    def parameters(self) -> dict[str, ParamValue]: ...
    @property
    def inputs(self) -> list[InputTensor]: ...
    @property
    def outputs(self) -> list[OutputTensor]: ...
    @property
    def raw_input_contents(self) -> list[WireBuffer]: ...
    @property
    def plain(self) -> list[tuple[str, str, tuple[int, ...], WireBuffer]] | None:
        """(name, datatype, shape, raw contents) per input, where the core found the request plain."""
    @property
    def arrays(self) -> dict[str, NDArray[Any]] | None:
        """Name -> input array over the core's bytes, where it is plain and every input's bytes fit its shape."""
    @property
    def declared(self) -> dict[str, str] | None:
        """With `arrays`: name -> datatype per input."""
    @property
    def output_parameters(self) -> dict[str, dict[str, ParamValue]]:
        """Requested output -> its parameters, in the request's order."""
    @property
    def size(self) -> int:
        """The request message's size in bytes."""

@final
class Call:
    """One call waiting for an answer; answer it exactly once."""

    @property
    def method(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def request(self) -> InferRequestView: ...
    @property
    def payload(self) -> bytes: ...
    def reply(self, message: bytes) -> None: ...
    def fail(self, code: int, message: str) -> None: ...
    def reply_infer(
        self, model_name: str, model_version: str, id: str, parameters: dict[str, ParamValue],
        outputs: Sequence[OutputPayload],
    ) -> None: ...
    def reply_response(self, response: InferResponse) -> bool: ...

@final
class StreamCall:
    """One stream (ModelStreamInfer, health Watch): ask for frames, send responses, end it once."""

    @property
    def id(self) -> int: ...
    @property
    def method(self) -> str: ...
    def want(self) -> None: ...
    def send(self, message: bytes | EncodedMessage) -> int: ...  # 0 sent, 1 full (wait for StreamWritable), 2 ended
    @staticmethod
    def encode_response(response: InferResponse, last: bool) -> EncodedMessage | None:
        """A ModelStreamInferResponse for `response` with its final flag; None where an output is not a plain
        numpy array."""
    @staticmethod
    def encode_bare(id: str, model_name: str, model_version: str, last: bool) -> EncodedMessage:
        """A ModelStreamInferResponse with no response: the id, model name and version, and the final flag."""
    def answered(self) -> None: ...  # a request read is answered (its last response sent, or it has none)
    def close(self) -> None: ...
    def fail(self, code: int, message: str) -> None: ...

@final
class StreamFrame:
    """A frame read from a stream: a request (payload), its end (payload None, code 0), or a failure."""

    @property
    def id(self) -> int: ...
    @property
    def payload(self) -> bytes | None: ...
    @property
    def has_payload(self) -> bool: ...
    def request(self) -> InferRequestView | None:
        """The payload decoded as a ModelInfer request (DecodeError where it is none); None without one."""
    @property
    def code(self) -> int: ...
    @property
    def message(self) -> str: ...

@final
class EncodedMessage:
    """A response message the core encoded, for `StreamCall.send`."""

    def __len__(self) -> int: ...

class DecodeError(ValueError):
    """A frame's bytes are no ModelInferRequest."""

@final
class StreamWritable:
    """A stream's response window has room again."""

    @property
    def id(self) -> int: ...

@final
class GrpcCore:
    """The gRPC server: `restricted` is (method path, header, value, refusal message) per restricted method."""

    def __init__(self, max_message_bytes: int, restricted: list[tuple[str, str, str, str]], threads: int, *,
                 handshake_timeout: float, keepalive_time: float, keepalive_timeout: float,
                 max_concurrent_streams: int, max_connections: int, max_incomplete_calls: int,
                 max_open_streams: int, send_timeout: float, max_connection_age: float,
                 max_connection_age_grace: float,
                 tls: tuple[bytes, bytes, bytes | None] | None = None) -> None: ...  # (chain, key, client roots) PEM
    def renew_tls(self, tls: tuple[bytes, bytes, bytes | None]) -> None: ...  # connections from now on (ValueError)
    def fileno(self) -> int: ...
    def start(self, address: str, port: int) -> int: ...
    def take(self) -> list[Call | StreamCall | StreamFrame | StreamWritable]: ...
    def stop(self, grace: float) -> None: ...
    def driver_fd(self) -> int | None: ...  # threads 0: the loop turns the core when this is readable
    def turn(self, take: Callable[[], object] | None = None) -> tuple[int, bool]: ...  # (polled, nothing left ready)
    def begin_stop(self) -> None: ...
    @property
    def finished(self) -> bool: ...
    def onnx_lane(self) -> OnnxLane: ...
    def answer_infer_in_core(self) -> None: ...  # the benchmark floor's (bench/pa/floor.py --in-core) only
    @property
    def answered_in_core(self) -> int: ...

LaneTensor = tuple[str, str, list[int]]  # (name, KServe datatype, the config's dims)

@final
class OnnxLane:
    """The core's ONNX lane: ModelInfer requests that match a served model's signature exactly are run on ONNX
    Runtime's C library and answered in the core; the others reach Python."""

    def serve(self, model: str, version: str, path: str, library: str, inputs: list[LaneTensor],
              outputs: list[LaneTensor], max_batch_size: int, intra_op_threads: int = 1) -> None: ...
    def withdraw(self, model: str) -> bool: ...
    def counts(self, model: str) -> tuple[int, int, int] | None: ...  # (answered, ns in run, handed to Python)
    def pooled(self, model: str) -> int | None: ...  # run on a blocking thread: until measured short (200 us)

@final
class BinaryInfer:
    """An infer body of the common binary shape as the core read it: every input's data binary after a small
    JSON header, no shared memory, and nothing the Python decoder would refuse for its structure."""

    @property
    def id(self) -> str: ...
    @property
    def parameters(self) -> dict[str, ParamValue]:
        """The request's parameters, in order, without `binary_data_output` (that is `binary_default`)."""
    @property
    def binary_default(self) -> bool: ...
    @property
    def inputs(self) -> list[tuple[str, str, tuple[int, ...], WireBuffer]]:
        """(name, datatype, shape, its bytes of the body), in order."""
    @property
    def outputs(self) -> dict[str, dict[str, ParamValue]]:
        """Requested output name -> its parameters, in order."""
    @property
    def arrays(self) -> dict[str, NDArray[Any]] | None:
        """Name -> input array over the body's bytes, where every input's bytes fit its fixed-size datatype."""
    @property
    def declared(self) -> dict[str, str] | None:
        """With `arrays`: name -> datatype per input."""

def check_tls(tls: tuple[bytes, bytes, bytes | None]) -> None:
    """ValueError naming what is wrong with (chain, key, client roots) PEM, by the rules GrpcCore serves them by."""

def binary_infer(header_length: str | None, body: bytes) -> BinaryInfer | None:
    """What the core reads from an infer body (as `HttpCall.binary`), or None where it leaves it to Python."""

def binary_reply_head(
    model_name: str, model_version: str, id: str, parameters: Mapping[str, ParamValue],
    outputs: Sequence[tuple[str, str, Sequence[int], int]],
) -> bytes | None:
    """The JSON header `HttpCall.reply_binary` writes (`outputs`: name, datatype, shape, data size), or None."""

def infer_reply_head(response: InferResponse, as_json: Collection[str]) -> bytes | None:
    """The JSON header `HttpCall.reply_response` writes for `response`, or None where it does not answer."""

@final
class HttpCall:
    """One KServe v2 infer request the HTTP core read: the path's model and version, the body, the reply."""

    @property
    def model(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def header_length(self) -> str | None: ...
    @property
    def size(self) -> int: ...
    @property
    def body(self) -> WireBuffer: ...
    @property
    def binary(self) -> BinaryInfer | None:
        """The body as the core read it when it has the common binary shape; None: decode `body`."""
    def reply_response(self, response: InferResponse, as_json: Collection[str]) -> bool:
        """200 from the response's own arrays, those named in `as_json` as JSON `data` in the header (BYTES too:
        its elements as text), the others as binary data after it, written by the core as
        `http_codec.encode_infer_parts` writes them, with the GIL released; False (nothing sent) where an array is
        not plain (a BYTES one as binary data) or a value is not one written exactly (NaN, bytes not UTF-8)."""
    def reply_binary(
        self, model_name: str, model_version: str, id: str, parameters: Mapping[str, ParamValue],
        outputs: Sequence[tuple[str, str, tuple[int, ...], bytes | NDArray[Any]]],
    ) -> bool:
        """200 with every output as binary data after a JSON header written by the core, byte for byte as
        `http_codec.encode_infer_parts` writes it, with the GIL released. False, nothing sent: a value it does
        not write exactly (a float parameter, an integer past 64 bits, text that is not Unicode)."""
    def reply(self, status: int, content_type: str, header_length: int | None, parts: Sequence[bytes | NDArray[Any]]) -> None:
        """The body is `parts` joined (each C-contiguous bytes: the JSON header, then binary outputs as
        uint8 views), with the GIL released."""

@final
class HttpCore:
    """The HTTP port: serves the infer endpoint, forwards everything else to the app on `upstream`.
    `body` / `json`: (limit, 413 body); `restriction`: (header, value, 403 body) of the inference category."""

    def __init__(
        self,
        body: tuple[int, bytes],
        json: tuple[int, bytes],
        restriction: tuple[str, str, bytes] | None,
        upstream: str,
        threads: int,
        body_grace: float,
        max_connections: int,
        serves_infer: bool,
        send_timeout: float,
    ) -> None: ...
    def fileno(self) -> int: ...
    def start(self, address: str, port: int) -> int: ...
    def take(self) -> list[HttpCall]: ...
    def stop(self, grace: float) -> None: ...
    def driver_fd(self) -> int | None: ...  # threads 0: the loop turns the core when this is readable
    def turn(self, take: Callable[[], object] | None = None) -> tuple[int, bool]: ...  # (polled, nothing left ready)
    def begin_stop(self) -> None: ...
    @property
    def finished(self) -> bool: ...

def answer_coding(accept_encoding: str) -> str | None:
    """The coding ("gzip" or "deflate") for an infer answer to a request with this Accept-Encoding, or None."""
