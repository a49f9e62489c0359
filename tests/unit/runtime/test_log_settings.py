"""`log_settings`: checking a logging-extension update (all of it before any is applied) and what the settings do
to a logger's handlers: which severities pass, the root level, the line's format."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator

import pytest
from ensemble_runtime.errors import ErrorCode, InferenceError
from ensemble_runtime.log_settings import LogControl, LogSettings, updated


def test_an_update_changes_only_what_it_names_and_passes_unknown_names_and_nulls_over() -> None:
    start = LogSettings()
    after = updated(start, {"log_info": False, "log_verbose_level": 3, "other": 1, "log_format": None})
    assert after == LogSettings(log_info=False, log_verbose_level=3)
    assert updated(start, {}) is start


@pytest.mark.parametrize(("changes", "code"), [
    ({"log_info": 1}, ErrorCode.INVALID_ARGUMENT),
    ({"log_verbose_level": False}, ErrorCode.INVALID_ARGUMENT),
    ({"log_verbose_level": 2**32}, ErrorCode.INVALID_ARGUMENT),
    ({"log_format": "iso8601"}, ErrorCode.INVALID_ARGUMENT),
    ({"log_file": ""}, ErrorCode.UNIMPLEMENTED),
])
def test_wrong_values_raise(changes: dict[str, object], code: ErrorCode) -> None:
    with pytest.raises(InferenceError) as refused:
        updated(LogSettings(), changes)
    assert refused.value.code is code


def test_a_null_is_refused_where_nulls_do_not_keep() -> None:
    with pytest.raises(InferenceError, match="expect boolean for 'log_warning'"):
        updated(LogSettings(), {"log_warning": None}, null_keeps=False)


@pytest.fixture
def own_logger() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger of its own standing in for the root (the process's logging is left alone), with one handler."""
    logger = logging.getLogger("test-root")  # registered: setLevel clears what it cached, as for the root
    logger.propagate = False
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    logger.addHandler(handler)
    yield logger, out
    # pytest's capture handlers sit on this logger too (it does not propagate), shared with the root's for the
    # whole run: the gates LogControl put on them would go on dropping what the settings left off (log_warning
    # off: every later test's caplog without warnings)
    for each in logger.handlers:
        for gate in [f for f in each.filters if type(f).__module__ == LogControl.__module__]:
            each.removeFilter(gate)
    logger.removeHandler(handler)
    logger.setLevel(logging.NOTSET)


def test_the_control_gates_severities_and_sets_the_level_and_format(
    own_logger: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = own_logger
    control = LogControl(LogSettings(), logger)
    for level in (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR):
        logger.log(level, "one %s", logging.getLevelName(level))
    assert [line.split()[3:] for line in out.getvalue().splitlines()] == [
        ["test-root:", "one", "INFO"], ["test-root:", "one", "WARNING"], ["test-root:", "one", "ERROR"]]
    assert logger.level == logging.INFO

    out.truncate(0)
    out.seek(0)
    control.update({"log_verbose_level": 1, "log_warning": False, "log_format": "ISO8601"})
    assert logger.level == logging.DEBUG
    for level in (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR):
        logger.log(level, "two")
    lines = out.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == ["DEBUG", "INFO", "ERROR"]
    assert all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ", line) for line in lines), lines


def test_a_failed_update_leaves_the_settings_as_they_were(own_logger: tuple[logging.Logger, io.StringIO]) -> None:
    logger, _ = own_logger
    control = LogControl(LogSettings(log_verbose_level=2), logger)
    with pytest.raises(InferenceError):
        control.update({"log_info": False, "log_format": "bogus"})
    assert control.settings == LogSettings(log_verbose_level=2)
    assert logger.level == logging.DEBUG
