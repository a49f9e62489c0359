"""Triton's trace extension: the trace settings a client reads and changes while the server runs (`GET/POST
/v2/trace/setting`, `/v2/models/{model}/trace/setting`, gRPC `TraceSetting`), which requests they sample, and
the traces of those requests in Triton's JSON shape (written by `tracing`).

Settings, as Triton names them and writes them (strings; `trace_level` a list): `trace_level` (`OFF`, or
`TIMESTAMPS`: the times a request reached each point on its way), `trace_rate` (one request traced in every that
many), `trace_count` (how many more requests to trace; -1: no end; it counts down as they are taken),
`log_frequency` (0: the traces are written to `trace_file` as the server stops; N: every N traces to
`trace_file.<k>`, k = 0, 1, ...), `trace_file` (set at start only: a client cannot choose a path the server
writes to; Triton refuses it the same way) and `trace_mode` (`triton`, set at start). A model's settings are
the global ones with the fields set for it; a null value (gRPC: a setting without values) clears a model's
field, or sets a global one back to what the server started with. Names Triton does not know are passed over,
as Triton does; every value is checked before any is applied.

Deliberate differences: `TENSORS` (Triton's tensor dumps) is refused, not half done; an unknown level is refused,
not passed over; a wrong value is a 400 naming the setting (Triton: 500 for a value that is not a string); a
trace level other than OFF needs a trace file. Traces hold no front end times (Triton's `GRPC_*`/`HTTP_*`):
the front end is the native core, which keeps no per-request clock. INFER_RESPONSE_COMPLETE is marked as each
response is complete: for a request's one response, after its compute (tritonserver's python stub sends it
inside), and for each response of a decoupled model or ensemble (and of a decoupled step) as it is sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ensemble_runtime.errors import ErrorCode, InferenceError, invalid
from ensemble_runtime.stats import ComputeTimes

OFF = "OFF"
TIMESTAMPS = "TIMESTAMPS"
TENSORS = "TENSORS"
TRITON = "triton"
UNLIMITED = -1
MAX_HELD = 10_000  # traces held for a file at once; more are dropped (a server tracing every request, writing at stop)
FILE_REFUSAL = "trace file location can not be updated through network protocol"  # Triton's words
# Triton's setting name -> TraceSettings field
NAMES = {"trace_level": "level", "trace_rate": "rate", "trace_count": "count", "log_frequency": "log_frequency",
         "trace_file": "file", "trace_mode": "mode"}
FLAG_NAMES = {field: name for name, field in NAMES.items()}  # --trace-config's names -> Triton's


@dataclass(frozen=True, slots=True)
class TraceSettings:
    level: tuple[str, ...] = (OFF,)
    rate: int = 1000
    count: int = UNLIMITED
    log_frequency: int = 0
    file: str = ""
    mode: str = TRITON

    @property
    def on(self) -> bool:
        """Whether requests are sampled now."""
        return TIMESTAMPS in self.level and self.count != 0

    def as_dict(self) -> dict[str, list[str] | str]:
        """As Triton writes them: every value a string, the level a list."""
        return {"trace_level": list(self.level), "trace_rate": str(self.rate), "trace_count": str(self.count),
                "log_frequency": str(self.log_frequency), "trace_file": self.file, "trace_mode": self.mode}


def parse_changes(values: Mapping[str, object]) -> dict[str, object]:
    """A request's settings (Triton's names; values as they came: JSON strings and lists, or lists of strings
    from gRPC where `grpc_lists`) as TraceSettings fields -> checked value, None for a null one. Raises the first
    wrong one; a trace file is refused (UNIMPLEMENTED)."""
    if "trace_file" in values:
        raise InferenceError(ErrorCode.UNIMPLEMENTED, FILE_REFUSAL)
    checked: dict[str, object] = {}
    for name in ("trace_level", "trace_rate", "trace_count", "log_frequency"):
        if name in values:
            value = values[name]
            checked[NAMES[name]] = None if value is None else _checked(name, value)
    return checked


def grpc_values(settings: Mapping[str, Sequence[str]]) -> dict[str, object]:
    """A TraceSetting request's settings as `parse_changes` takes them: no values is null, the level its list,
    any other setting its one value."""
    values: dict[str, object] = {}
    for name, given in settings.items():
        if not given:
            values[name] = None
        elif name == "trace_level":
            values[name] = list(given)
        elif len(given) == 1:
            values[name] = given[0]
        else:
            raise invalid(f"expect a single value for '{name}', got {len(given)}")
    return values


def _checked(name: str, value: object) -> object:
    if name == "trace_level":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise invalid("expect an array of strings for 'trace_level'")
        for level in value:
            if level == TENSORS:
                raise invalid("trace level TENSORS is not supported by this server (OFF and TIMESTAMPS are)")
            if level not in (OFF, TIMESTAMPS):
                raise invalid(f"unknown trace level '{level}' (OFF or TIMESTAMPS)")
        return (TIMESTAMPS,) if TIMESTAMPS in value else (OFF,)
    if not isinstance(value, str):
        raise invalid(f"expect a string for '{name}'")
    try:
        number = int(value)
    except ValueError:
        raise invalid(f"Unable to parse '{name}', got: {value}") from None
    least = {"trace_rate": 1, "trace_count": UNLIMITED, "log_frequency": 0}[name]
    if not least <= number < 2**31:
        raise invalid(f"'{name}' must be an integer from {least} to {2**31 - 1}, got: {value}")
    return number


@dataclass(slots=True)
class Trace:
    """One traced request (or an ensemble step of one): the times it reached each point, in nanoseconds of the
    monotonic clock (`time.perf_counter_ns`, the clock Triton's traces use too)."""

    id: int
    model: str
    version: int
    request_id: str
    parent_id: int = 0  # 0: a request of its own
    stamps: list[tuple[str, int]] = field(default_factory=list)

    def mark(self, name: str, ns: int) -> None:
        self.stamps.append((name, ns))

    def ran(self, start: int, input_end: int, output_start: int, end: int) -> None:
        """Its execution on a model instance: Triton's compute points."""
        self.stamps += [("COMPUTE_START", start), ("COMPUTE_INPUT_END", input_end),
                        ("COMPUTE_OUTPUT_START", output_start), ("COMPUTE_END", end)]

    def records(self) -> list[dict[str, Any]]:
        """In Triton's shape: the request's record, then one per point."""
        head: dict[str, Any] = {"id": self.id, "model_name": self.model, "model_version": self.version,
                                "request_id": self.request_id}
        if self.parent_id:
            head["parent_id"] = self.parent_id
        return [head, *({"id": self.id, "timestamps": [{"name": n, "ns": ns}]} for n, ns in self.stamps)]


class TraceControl:
    """The live trace settings (global, and per model the fields set for it), the sampling of requests, and the
    traces taken until they are written (`finish` hands over what is due for a file)."""

    def __init__(self, start: TraceSettings) -> None:
        self._start = start
        self._global = start
        self._models: dict[str, dict[str, object]] = {}  # model -> the fields set for it
        # requests seen per sampling scope: "" the global one, a model's where it has a trace count of its own
        self._seen: dict[str, int] = {"": 0}
        self._next_id = 1
        self._held: list[Trace] = []
        self._files = 0  # files written so far (log_frequency > 0: the next one's suffix)
        self.dropped = 0
        self.active = start.on  # read per request: False keeps the data plane's fast path

    def settings(self, model: str = "") -> TraceSettings:
        own = self._models.get(model) if model else None
        return replace(self._global, **own) if own else self._global  # type: ignore[arg-type]

    def update(self, changes: Mapping[str, object], model: str = "") -> TraceSettings:
        """Apply checked changes (`parse_changes`) to the global settings or to `model`'s; the settings then."""
        if model:
            own = dict(self._models.get(model, {}))
            for name, value in changes.items():
                if value is None:
                    own.pop(name, None)
                else:
                    own[name] = value
            self._check_file(replace(self._global, **own))  # type: ignore[arg-type]
            self._models[model] = own
            if "count" in changes:
                self._seen.pop(model, None)
                if "count" in own:
                    self._seen[model] = 0
        else:
            values = {n: getattr(self._start, n) if v is None else v for n, v in changes.items()}
            candidate = replace(self._global, **values)  # type: ignore[arg-type]
            self._check_file(candidate)
            for own in self._models.values():
                self._check_file(replace(candidate, **own))  # type: ignore[arg-type]
            self._global = candidate
        self._refresh_active()
        return self.settings(model)

    def _refresh_active(self) -> None:
        self.active = self._global.on or any(self.settings(m).on for m in self._models)

    def _scope(self, model: str) -> str:
        return model if model in self._seen else ""

    def _check_file(self, settings: TraceSettings) -> None:
        if settings.on and not settings.file:
            raise invalid("tracing needs a trace file: start the server with --trace-config triton,file=PATH")

    def due(self, model: str) -> bool:
        """Whether the next request of `model` is to be traced (nothing counted: `begin` or `pass_over` does)."""
        settings = self.settings(model)
        return settings.on and self._seen[self._scope(model)] % settings.rate == 0

    def pass_over(self, model: str) -> None:
        """Count a request of `model` that `due` said is not traced, taken without `begin`."""
        if self.settings(model).on:
            self._seen[self._scope(model)] += 1

    def begin(self, model: str, version: int, request_id: str) -> Trace | None:
        """A trace for this request when its model's settings sample it (one in every `trace_rate`, while the
        count lasts), else None; counted either way."""
        sampled = self.due(model)
        self.pass_over(model)
        if not sampled:
            return None
        count = self.settings(model).count
        if count > 0:
            self._count_down(self._scope(model), count - 1)
        return self._new(model, version, request_id, 0)

    def _count_down(self, key: str, left: int) -> None:
        if key:
            self._models[key]["count"] = left
        else:
            self._global = replace(self._global, count=left)
        if left == 0:
            self._refresh_active()

    def child(self, parent: Trace, model: str, version: int) -> Trace:
        """The trace of an ensemble step of a traced request."""
        return self._new(model, version, parent.request_id, parent.id)

    def _new(self, model: str, version: int, request_id: str, parent_id: int) -> Trace:
        trace = Trace(self._next_id, model, version, request_id, parent_id)
        self._next_id += 1
        return trace

    def finish(self, traces: Sequence[Trace], model: str) -> tuple[str, list[Trace]] | None:
        """Hold a request's traces (its own and its steps'); (path, traces) when a file is due (log_frequency
        reached for `model`'s settings)."""
        if len(self._held) + len(traces) > MAX_HELD:
            self.dropped += len(traces)
            return None
        self._held += traces
        settings = self.settings(model)
        if not settings.log_frequency or self._requests_held() < settings.log_frequency:
            return None
        due, self._held = self._held, []
        path = f"{settings.file}.{self._files}"
        self._files += 1
        return path, due

    def _requests_held(self) -> int:
        return sum(1 for t in self._held if not t.parent_id)

    def flush(self) -> tuple[str, list[Trace]] | None:
        """At stop: what is held, for the file Triton writes then (`trace_file`, or the next numbered one)."""
        if not self._held or not self._global.file:
            return None
        due, self._held = self._held, []
        path = f"{self._global.file}.{self._files}" if self._files or self._global.log_frequency else self._global.file
        return path, due


def settings_from_flags(entries: Sequence[str]) -> TraceSettings:
    """`--trace-config` values, as Triton takes them: `[MODE,]NAME=VALUE`, MODE `triton`; NAME one of `level`
    (OFF or TIMESTAMPS), `rate`, `count`, `log_frequency`, `file`, `mode`. Raises ValueError for a wrong one."""
    values: dict[str, object] = {}
    for entry in entries:
        mode, sep, rest = entry.partition(",")
        if sep and "=" not in mode:
            if mode != TRITON:
                raise ValueError(f"--trace-config {entry!r}: only the '{TRITON}' trace mode is served")
            entry = rest
        name, eq, value = entry.partition("=")
        if not eq or name not in FLAG_NAMES:
            raise ValueError(f"--trace-config {entry!r}: expected NAME=VALUE, NAME one of level, rate, count, "
                             "log_frequency, file, mode")
        if name == "mode":
            if value != TRITON:
                raise ValueError(f"--trace-config {entry!r}: only the '{TRITON}' trace mode is served")
            continue
        if name == "file":
            values["file"] = value
            continue
        try:
            values[name] = _checked(FLAG_NAMES[name], [value.upper()] if name == "level" else value)
        except InferenceError as exc:
            raise ValueError(f"--trace-config {entry!r}: {exc.message}") from None
    settings = replace(TraceSettings(), **values)  # type: ignore[arg-type]
    if settings.on and not settings.file:
        raise ValueError("--trace-config: tracing needs a trace file (--trace-config triton,file=PATH)")
    return settings


@dataclass(slots=True, kw_only=True)
class TracedTimes(ComputeTimes):
    """The times a traced request hands its scheduler: its execution's points go to `trace`, its phases to
    `into` (an ensemble request's sum) where there is one."""

    trace: Trace | None = None
    into: ComputeTimes | None = None

    def add(self, other: ComputeTimes) -> None:
        if self.into is not None:
            self.into.add(other)

    def ran(self, start: int, input_end: int, output_start: int, end: int) -> None:
        if self.trace is not None:
            self.trace.ran(start, input_end, output_start, end)
