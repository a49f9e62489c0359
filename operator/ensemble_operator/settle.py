"""Which Models changed too recently to be rendered yet (Settings.model_settle_seconds).

Models applied together (one `kubectl apply` of several) reach the operator as separate events, moments apart.
Rendering an Ensemble's config between them would give its pods one Model's new spec next to another's old
one. So each Model change is noted when its event arrives; until `seconds` have passed, no reconcile of an
Ensemble using that Model rewrites its config. The Model's handler marks those Ensembles; each Ensemble's
worker waits until its Models have settled (`remaining`), then reconciles with the whole batch in place (see
workers.py). Kept in memory: after an operator restart nothing is settling, which only costs the batching,
never a change.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass
class ModelSettle:
    seconds: float = 0.0
    clock: Callable[[], float] = time.monotonic
    _changed: dict[tuple[str, str], float] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def changed(self, namespace: str, name: str) -> None:
        """A Model's spec changed (or it was created) just now."""
        with self._guard:
            self._changed[(namespace, name)] = self.clock()

    def settling(self, namespace: str, names: Iterable[str]) -> list[str]:
        """The Models among `names` (in `namespace`) that changed less than `seconds` ago, sorted."""
        now = self.clock()
        with self._guard:
            for key in [key for key, when in self._changed.items() if now - when >= self.seconds]:
                del self._changed[key]
            return sorted({name for name in names if (namespace, name) in self._changed})

    def remaining(self, namespace: str, names: Iterable[str]) -> float:
        """Seconds until the last of `names` that is settling has settled (0: none is)."""
        now = self.clock()
        with self._guard:
            ages = [now - self._changed[(namespace, n)] for n in names if (namespace, n) in self._changed]
        return max((self.seconds - age for age in ages), default=0.0) if ages else 0.0
