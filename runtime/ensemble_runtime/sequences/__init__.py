"""Sequence batching (Triton's `sequence_batching`): control inputs, implicit state, slots, idle release."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from ensemble_runtime.sequences.controls import (
    FLAG_END,
    FLAG_START,
    CorrelationId,
    SequenceSettings,
    SequenceTag,
    has_sequence_batching,
    names_sequence,
    settings_from_config,
    take_sequence_parameters,
)
from ensemble_runtime.sequences.scheduler import SequenceScheduler

__all__ = [
    "FLAG_END",
    "FLAG_START",
    "CorrelationId",
    "SequenceScheduler",
    "SequenceSettings",
    "SequenceTag",
    "has_sequence_batching",
    "live_version",
    "names_sequence",
    "settings_from_config",
    "take_sequence_parameters",
]


class _Versioned(Protocol):
    @property
    def scheduler(self) -> object: ...


V = TypeVar("V", bound=_Versioned)


def live_version(versions: Iterable[V], correlation_id: CorrelationId) -> V | None:
    """The loaded version (served or draining) whose scheduler runs the live sequence with this ID: its later
    requests go there, so a sequence ends on the version it started on while new ones start on the newest."""
    for version in versions:
        scheduler = version.scheduler
        if isinstance(scheduler, SequenceScheduler) and scheduler.holds(correlation_id):
            return version
    return None
