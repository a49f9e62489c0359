"""What the runtime pods found in storage, per Model: the Ensemble workers record their pods' listings, the
Model worker writes the union to Model.status.versionsFound (its only writer).

Several Ensembles may use one Model, and their pods may have listed storage at different moments: each
Ensemble's contribution is kept apart and the union taken over all of them, so that two Ensembles never write
two different answers in turn. In memory, touched from the event loop only; after a restart nothing is
known until the pods report again, and Model status keeps what it said.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

Key = tuple[str, str]  # (namespace, name)


@dataclass
class FoundVersions:
    _by_model: dict[Key, dict[str, tuple[int, ...]]] = field(default_factory=dict)  # model -> ensemble -> found

    def record(self, namespace: str, ensemble: str, found: Mapping[str, Sequence[int]]) -> list[str]:
        """Ensemble `ensemble`'s pods found `found` (model -> versions; models they did not report are left
        as they were). Returns the Models whose union changed, sorted."""
        changed: list[str] = []
        for model, versions in sorted(found.items()):
            per = self._by_model.setdefault((namespace, model), {})
            before = self.union(namespace, model)
            per[ensemble] = tuple(sorted(set(versions)))
            if self.union(namespace, model) != before:
                changed.append(model)
        return changed

    def drop(self, namespace: str, ensemble: str) -> list[str]:
        """Ensemble `ensemble` is gone: its contributions go. Returns the Models whose union changed."""
        changed: list[str] = []
        for (ns, model), per in sorted(self._by_model.items()):
            if ns == namespace and ensemble in per:
                before = self.union(ns, model)
                del per[ensemble]
                if self.union(ns, model) != before:
                    changed.append(model)
        return changed

    def union(self, namespace: str, model: str) -> list[int] | None:
        """The versions any recorded pod found for Model `model` (None: no pod has reported it)."""
        per = self._by_model.get((namespace, model))
        if not per:
            return None
        return sorted({v for versions in per.values() for v in versions})
