"""Triton's logging extension: the log settings a client reads and changes while the server runs (`GET/POST
/v2/logging`, gRPC `LogSettings`), and what they do to the process's logging.

Settings, as Triton names them: `log_info`, `log_warning`, `log_error` (whether records of that severity are
written), `log_verbose_level` (above 0, verbose records too: the runtime's DEBUG records and python models'
`pb_utils.Logger.log_verbose`), `log_format` (`default`: the runtime's own lines; `ISO8601`: the time first, in
UTC, as 2026-11-29T18:46:01Z) and `log_file` (always empty: the log goes to the console). A request may name
any of them; names it does not know are passed over, as Triton does. Every value is checked before any is
applied: an update applies whole or not at all. `log_file` cannot be changed over the network (a client would
choose a path the server writes to): Triton refuses it the same way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ensemble_runtime.errors import ErrorCode, InferenceError, invalid

DEFAULT = "default"
ISO8601 = "ISO8601"
FORMATS = (DEFAULT, ISO8601)
LINE = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # the runtime's own (`default`)
_FLAGS = ("log_info", "log_warning", "log_error")
MAX_VERBOSE = 2**32 - 1  # a uint32, as Triton's gRPC message carries it


@dataclass(frozen=True, slots=True)
class LogSettings:
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = DEFAULT

    def as_dict(self) -> dict[str, str | bool | int]:
        """In Triton's order, `log_file` included."""
        return {"log_file": "", "log_info": self.log_info, "log_warning": self.log_warning,
                "log_error": self.log_error, "log_verbose_level": self.log_verbose_level,
                "log_format": self.log_format}

    def writes(self, level: int) -> bool:
        """Whether a record of `level` is written."""
        if level >= logging.ERROR:
            return self.log_error
        if level >= logging.WARNING:
            return self.log_warning
        if level >= logging.INFO:
            return self.log_info
        return self.log_verbose_level > 0


def updated(current: LogSettings, changes: Mapping[str, object], null_keeps: bool = True) -> LogSettings:
    """`current` with `changes` (JSON values: booleans, a non-negative integer, a string) applied, or the error
    of the first wrong one. A null value changes nothing where `null_keeps` (Triton's HTTP endpoint passes them
    over; its gRPC one refuses a setting without a value)."""
    if "log_file" in changes:
        raise InferenceError(ErrorCode.UNIMPLEMENTED, "log file location can not be updated through network protocol")
    fields: dict[str, object] = {}
    for name in (*_FLAGS, "log_verbose_level", "log_format"):
        if name not in changes:
            continue
        value = changes[name]
        if value is None and null_keeps:
            continue
        fields[name] = _checked(name, value)
    return replace(current, **fields) if fields else current  # type: ignore[arg-type]


def _checked(name: str, value: object) -> object:
    if name in _FLAGS:
        if not isinstance(value, bool):
            raise invalid(f"expect boolean for '{name}'")
        return value
    if name == "log_verbose_level":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_VERBOSE:
            raise invalid("expect an unsigned 32-bit integer for 'log_verbose_level'")
        return value
    if not isinstance(value, str) or value not in FORMATS:
        raise invalid(f"invalid argument for log_format, got: {value} (one of {', '.join(FORMATS)})")
    return value


class _Gate(logging.Filter):
    """On the process's log handlers: writes a record where the settings let its severity through."""

    def __init__(self, control: LogControl) -> None:
        super().__init__()
        self._control = control

    def filter(self, record: logging.LogRecord) -> bool:
        return self._control.settings.writes(record.levelno)


class LogControl:
    """The live log settings of the process: `apply` puts them into effect on the root logger's handlers (a gate
    per handler, their format) and its level (DEBUG only while verbose: no verbose record is made otherwise)."""

    def __init__(self, settings: LogSettings, root: logging.Logger | None = None) -> None:
        self.settings = settings
        self._root = root if root is not None else logging.getLogger()
        self._gate = _Gate(self)
        self.apply(settings)

    def update(self, changes: Mapping[str, object], null_keeps: bool = True) -> LogSettings:
        """Check `changes` and apply them all (raising, with nothing changed, when one is wrong)."""
        self.apply(updated(self.settings, changes, null_keeps))
        return self.settings

    def apply(self, settings: LogSettings) -> None:
        self.settings = settings
        self._root.setLevel(logging.DEBUG if settings.log_verbose_level > 0 else logging.INFO)
        formatter = _formatter(settings.log_format)
        for handler in self._root.handlers:
            if self._gate not in handler.filters:
                handler.addFilter(self._gate)
            handler.setFormatter(formatter)


def _formatter(log_format: str) -> logging.Formatter:
    if log_format == ISO8601:
        formatter = logging.Formatter(LINE, datefmt="%Y-%m-%dT%H:%M:%SZ")
        formatter.converter = time.gmtime
        return formatter
    return logging.Formatter(LINE)
