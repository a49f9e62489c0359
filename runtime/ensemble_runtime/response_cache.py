"""Triton's response cache (`--cache-config local,size=N`, `response_cache { enable: true }` in a model's config):
responses by request key, bounded in bytes, the least recently used evicted first. Pure; used on the loop only.

The key is a 128-bit BLAKE2b digest of what decides the response: the model's identity (name, version and the
version's content fingerprint; for an ensemble its whole version set), each input's name, datatype, shape and
bytes (a BYTES element with its length), the request's parameters (a Python model may answer by them), the
outputs asked for and their classification counts. A response too large for the whole cache is not stored.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

_OBJECT_OVERHEAD = 64  # bytes counted per BYTES element besides its own, and per stored tensor


@dataclass(frozen=True, slots=True)
class CachedResponse:
    outputs: Mapping[str, npt.NDArray[Any]]
    size: int


def request_key(identity: str, inputs: Mapping[str, npt.NDArray[Any]], requested: Iterable[str],
                classes: Mapping[str, int], parameters: Mapping[str, object] | None = None) -> bytes:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(identity.encode())
    for name, value in sorted((parameters or {}).items()):
        digest.update(b"\0p" + repr((name, type(value).__name__, value)).encode())
    for name in sorted(inputs):
        array = inputs[name]
        shape = struct.pack(f"<{array.ndim}q", *array.shape)
        digest.update(b"\0i" + name.encode() + b"\0" + array.dtype.str.encode() + shape)
        if array.dtype == np.object_:
            for item in array.reshape(-1):
                data = item if isinstance(item, bytes) else str(item).encode()
                digest.update(struct.pack("<q", len(data)) + data)
        else:
            digest.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)
    for name in requested:
        digest.update(b"\0o" + name.encode() + b"\0" + str(classes.get(name, 0)).encode())
    return digest.digest()


def response_size(outputs: Mapping[str, npt.NDArray[Any]]) -> int:
    """The bytes a response takes in the cache: its tensors' (a BYTES element's own, each) and their overhead."""
    size = 0
    for array in outputs.values():
        size += _OBJECT_OVERHEAD + array.nbytes
        if array.dtype == np.object_:
            size += sum(_OBJECT_OVERHEAD + len(item) if isinstance(item, bytes) else _OBJECT_OVERHEAD
                        for item in array.reshape(-1))
    return size


def stored(outputs: Mapping[str, npt.NDArray[Any]], limit: int | None = None) -> CachedResponse | None:
    """A copy of a response as the cache keeps it (a model may reuse its output buffers), with its size; None
    (and no copy made) when it is larger than `limit`."""
    size = response_size(outputs)
    if limit is not None and size > limit:
        return None
    copies = {name: np.array(array, copy=True) for name, array in outputs.items()}
    return CachedResponse(copies, size)


class ResponseCache:
    """Responses by key, at most `capacity` bytes of them; counts what Triton's cache metrics report."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._entries: OrderedDict[bytes, CachedResponse] = OrderedDict()
        self.lookups = self.hits = self.misses = self.evictions = 0
        self.lookup_ns = self.insertion_ns = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes) -> CachedResponse | None:
        self.lookups += 1
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end(key)
        return entry

    def put(self, key: bytes, entry: CachedResponse) -> bool:
        """Store `entry` (replacing one under the same key), evicting the least recently used to make room;
        False when it alone is larger than the cache."""
        if entry.size > self.capacity:
            return False
        previous = self._entries.pop(key, None)
        if previous is not None:
            self.used -= previous.size
        while self.used + entry.size > self.capacity and self._entries:
            _, evicted = self._entries.popitem(last=False)
            self.used -= evicted.size
            self.evictions += 1
        self._entries[key] = entry
        self.used += entry.size
        return True

    def utilization(self) -> float:
        return self.used / self.capacity if self.capacity else 0.0
