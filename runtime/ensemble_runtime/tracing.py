"""The data plane's side of Triton's trace extension: the traces of the requests the settings sample
(`traces.TraceControl`), begun and ended as the data plane takes and answers them, and written to their file
as Triton writes them (one JSON array of their records) off the event loop."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

from ensemble_runtime.traces import Trace, TraceControl, TraceSettings

log = logging.getLogger(__name__)


def write(path: str, traces: Sequence[Trace]) -> None:
    """Write `traces` to `path` (replacing it) whole: written beside it under a hidden name first, then renamed,
    so that a reader never finds half a file. A failure is logged, not raised: tracing never fails a request."""
    records = [record for trace in traces for record in trace.records()]
    target = Path(path)
    staged = target.with_name(f".{target.name}.writing")
    try:
        staged.write_text(json.dumps(records), encoding="utf-8")
        os.replace(staged, target)
    except OSError as exc:
        log.error("could not write %d trace(s) to %s: %s", len(traces), path, exc)


class Tracing:
    """A request's traces are a list: its own first, its ensemble steps' after (`step`)."""

    def __init__(self, control: TraceControl | None = None) -> None:
        self.control = control if control is not None else TraceControl(TraceSettings())
        self._writes: set[asyncio.Future[None]] = set()

    def begin(self, model: str, version: int, request_id: str, start_ns: int) -> list[Trace] | None:
        """The traces of a request its model's settings sample (counted either way), else None."""
        trace = self.control.begin(model, version, request_id)
        if trace is None:
            return None
        trace.mark("REQUEST_START", start_ns)
        return [trace]

    def step(self, traced: list[Trace], model: str, version: int, start_ns: int) -> Trace:
        """The trace of an ensemble step of a traced request, handed to its model now."""
        child = self.control.child(traced[0], model, version)
        child.mark("REQUEST_START", start_ns)
        child.mark("QUEUE_START", start_ns)
        traced.append(child)
        return child

    def end(self, traced: list[Trace], model: str, answered: bool = False) -> None:
        """On the loop, as the request ends (`answered`: with its one response, which completes now): held, or
        written with those held when a file is due."""
        now = time.perf_counter_ns()
        if answered:
            traced[0].mark("INFER_RESPONSE_COMPLETE", now)
        traced[0].mark("REQUEST_END", now)
        due = self.control.finish(traced, model)
        if due is not None:
            self._write(*due)

    def _write(self, path: str, traces: list[Trace]) -> None:
        future = asyncio.get_running_loop().run_in_executor(None, write, path, traces)
        self._writes.add(future)
        future.add_done_callback(self._writes.discard)

    async def flush(self) -> None:
        """As the server stops: the traces held written (Triton's log_frequency 0), and every write done."""
        due = self.control.flush()
        if due is not None:
            self._write(*due)
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
