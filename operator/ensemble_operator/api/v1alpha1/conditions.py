"""Condition types and reasons of Ensemble and Model status: written in one place, read by the operator's
status computation, its events and the tests."""

from __future__ import annotations

from enum import StrEnum


class ConditionType(StrEnum):
    READY = "Ready"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    ACCEPTED = "Accepted"  # Model: its spec is accepted (and which Ensembles use it)
    DELETION_BLOCKED = "DeletionBlocked"  # Model: deleted while Ensembles still use it


class Reason(StrEnum):
    # Ensemble
    INVALID_SPEC = "InvalidSpec"
    CREATING = "Creating"
    AS_EXPECTED = "AsExpected"
    SCALED_TO_ZERO = "ScaledToZero"
    NO_READY_REPLICAS = "NoReadyReplicas"
    ALL_REPLICAS_READY = "AllReplicasReady"
    PARTIALLY_READY = "PartiallyReady"
    ROLLING_OUT = "RollingOut"
    VERSION_SWITCH = "VersionSwitch"
    ROLLOUT_COMPLETE = "RolloutComplete"
    PODS_UNSCHEDULABLE = "PodsUnschedulable"
    PODS_FAILING = "PodsFailing"
    STORAGE_UNREACHABLE = "StorageUnreachable"
    VERSION_LOAD_FAILED = "VersionLoadFailed"
    PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
    VERSION_NOT_FOUND = "VersionNotFound"
    REPLICAS_UNAVAILABLE = "ReplicasUnavailable"
    # Model
    VALID = "Valid"
    IN_USE = "InUse"
