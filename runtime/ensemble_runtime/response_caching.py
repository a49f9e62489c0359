"""The data plane's side of Triton's response cache (response_cache.py): which versions use it, looking a request
up and storing its response, and how each counts in the version's statistics, as tritonserver counts them.

A hit counts as a success with its queue time (up to the lookup) and in `cache_hit` (the lookup's time); it
runs nothing, so it is no inference, execution or compute. A miss runs as any request and adds to `cache_miss`
the time of its lookup and of storing its response. A model caches its answers to direct requests and to the
ensembles it is a step of; an ensemble with the cache enabled caches its own answers (its version set is part of
the key: a rollover never answers from the set before).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ensemble_runtime.inference import BackendRequest, Tensor
from ensemble_runtime.registry import LoadedVersion
from ensemble_runtime.response_cache import CachedResponse, ResponseCache, request_key, stored


@dataclass(frozen=True, slots=True)
class Lookup:
    key: bytes
    ns: int  # the lookup's time
    hit: CachedResponse | None


def identity(lv: LoadedVersion, steps: Iterable[LoadedVersion] = ()) -> str:
    """What a key names of the version that answers: a model version's content, or an ensemble's set."""
    parts = [f"{lv.model}\0{lv.version}\0{lv.fingerprint}"]
    parts.extend(f"{s.model}\0{s.version}\0{s.fingerprint}" for s in steps)
    return "\n".join(parts)


@dataclass
class Caching:
    cache: ResponseCache

    @staticmethod
    def enabled(lv: LoadedVersion) -> bool:
        return bool(lv.config.response_cache.enable)

    def lookup(self, lv: LoadedVersion, identity: str, request: BackendRequest, classes: Mapping[str, int],
               start_ns: int) -> Lookup:
        """Look `request` up; a hit is counted here (the caller answers it and counts its success)."""
        began = time.perf_counter_ns()
        key = request_key(identity, request.inputs, request.requested_outputs, classes, request.parameters)
        hit = self.cache.get(key)
        ended = time.perf_counter_ns()
        self.cache.lookup_ns += ended - began
        if hit is not None:
            lv.stats.queue.add(began - start_ns)
            lv.stats.cache_hit.add(ended - began)
        return Lookup(key, ended - began, hit)

    def store(self, lv: LoadedVersion, lookup: Lookup, outputs: Mapping[str, Tensor]) -> None:
        """A miss's response (its outputs: the parameters it is answered with come from the key's version or
        version set), stored; the miss counted."""
        began = time.perf_counter_ns()
        entry = stored(outputs, self.cache.capacity)  # larger than the cache: not even copied
        if entry is not None:
            self.cache.put(lookup.key, entry)
        spent = time.perf_counter_ns() - began
        self.cache.insertion_ns += spent
        lv.stats.cache_miss.add(lookup.ns + spent)
