"""Triton ensembles: validated step graphs (pure) and an async executor with injected model calls."""

from ensemble_runtime.ensemble.executor import StepCaller, run_ensemble
from ensemble_runtime.ensemble.graph import EnsembleGraph, build_graph
from ensemble_runtime.ensemble.steps import ExecutionPlan, PlannedStep, Step

__all__ = [
    "EnsembleGraph",
    "ExecutionPlan",
    "PlannedStep",
    "Step",
    "StepCaller",
    "build_graph",
    "run_ensemble",
]
