"""Which models one load operation takes together. Pure over the registry's records and a config lookup.

A load of some models also takes the loaded ensembles over them and the steps of every ensemble among those
(steps first), so an ensemble's steps switch all or nothing; names whose sets share no model load apart.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.model_config import is_ensemble
from ensemble_runtime.registry import ModelRecord

Peek = Callable[[str], mc.ModelConfig | None]  # the config a name would load with; None: unknown or unreadable


def ensembles_over(records: Mapping[str, ModelRecord], names: Collection[str]) -> list[str]:
    """Loaded ensembles one of whose steps is among `names` (and not named themselves)."""
    wanted = set(names)
    return [
        rec.name
        for rec in records.values()
        if rec.ensemble is not None and rec.name not in wanted and rec.served
        and wanted & {step.model_name for step in rec.ensemble.graph.steps}
    ]


def with_steps(names: list[str], peek: Peek) -> list[str]:
    """Names plus the step models of any ensembles among them, steps first."""
    ordered: list[str] = []
    for name in names:
        config = peek(name)
        if config is not None and is_ensemble(config):
            for step in config.ensemble_scheduling.step:
                if step.model_name not in ordered and step.model_name != name:
                    ordered.extend(with_steps([step.model_name], peek))
        if name not in ordered:
            ordered.append(name)
    return list(dict.fromkeys(ordered))


def closure(records: Mapping[str, ModelRecord], names: list[str], peek: Peek) -> list[str]:
    """`names`, the loaded ensembles over them and the steps of every ensemble among those, steps first."""
    return with_steps(names + ensembles_over(records, names), peek)


def groups(records: Mapping[str, ModelRecord], names: list[str], peek: Peek) -> list[list[str]]:
    """The names split into groups that share no model (with their ensembles and steps): loaded apart."""
    found: list[tuple[list[str], list[str]]] = []  # (seeds, closure)
    for name in names:
        seeds, members = [name], closure(records, [name], peek)
        for other in [g for g in found if set(g[1]) & set(members)]:
            found.remove(other)
            seeds, members = other[0] + seeds, list(dict.fromkeys(other[1] + members))
        found.append((seeds, members))
    return [seeds for seeds, _ in found]
