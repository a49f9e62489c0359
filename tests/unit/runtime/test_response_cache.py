"""The response cache (response_cache.py): keys, the byte bound, least recently used out first; and
`--cache-config` as Triton takes it."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from ensemble_runtime.response_cache import ResponseCache, request_key, stored
from ensemble_runtime.settings import parse_settings


def _key(identity: str = "m\x001\x00fp", requested: tuple[str, ...] = ("Y",), classes: dict[str, int] | None = None,
         **inputs: npt.NDArray[Any]) -> bytes:
    return request_key(identity, inputs or {"X": np.arange(4, dtype=np.float32)}, requested, classes or {})


def test_the_key_changes_with_whatever_decides_the_response() -> None:
    base = _key()
    assert _key() == base  # the same request: the same key
    assert _key(X=np.arange(4, dtype=np.float32)) == base
    different = [
        _key(identity="m\x002\x00fp"),  # another version
        _key(identity="m\x001\x00other"),  # the same version number, other content (a re-upload)
        _key(X=np.arange(4, dtype=np.float64)),  # another datatype
        _key(X=np.arange(4, dtype=np.float32).reshape(2, 2)),  # another shape, the same bytes
        _key(X=np.array([0, 1, 2, 4], dtype=np.float32)),  # other bytes
        _key(requested=("Y", "Z")),
        _key(classes={"Y": 2}),
        _key(X=np.arange(4, dtype=np.float32), W=np.zeros(1, np.int8)),
        request_key("m\x001\x00fp", {"X": np.arange(4, dtype=np.float32)}, ("Y",), {}, {"mode": "fast"}),
        request_key("m\x001\x00fp", {"X": np.arange(4, dtype=np.float32)}, ("Y",), {}, {"mode": 1}),
    ]
    assert len({base, *different}) == len(different) + 1
    # BYTES elements are delimited: b"ab", b"c" is not b"a", b"bc"
    assert _key(X=np.array([b"ab", b"c"], dtype=np.object_)) != _key(X=np.array([b"a", b"bc"], dtype=np.object_))
    strided = np.arange(8, dtype=np.float32)[::2]  # not contiguous: keyed by its values
    assert _key(X=strided) == _key(X=np.array([0, 2, 4, 6], dtype=np.float32))


def test_entries_are_copies_sized_by_their_bytes() -> None:
    output = np.ones(100, np.float32)
    entry = stored({"Y": output})
    output[:] = 7  # a model that reuses its buffer does not change what was stored
    assert entry is not None and float(entry.outputs["Y"][0]) == 1.0 and entry.size >= 400
    strings = stored({"S": np.array([b"x" * 1000], dtype=np.object_)})
    assert strings is not None and strings.size >= 1000
    assert stored({"Y": output}, limit=399) is None  # larger than the cache: never copied


def test_the_least_recently_used_leave_first_and_the_bound_holds() -> None:
    one = stored({"Y": np.zeros(100, np.uint8)})
    huge = stored({"Y": np.zeros(10_000, np.uint8)})
    assert one is not None and huge is not None
    cache = ResponseCache(capacity=3 * one.size)
    for key in (b"a", b"b", b"c"):
        assert cache.put(key, one)
    assert cache.get(b"a") is one  # "a" used last: "b" is the oldest now
    assert cache.put(b"d", one)
    assert cache.get(b"b") is None and cache.get(b"a") is one and len(cache) == 3
    assert cache.used <= cache.capacity and cache.evictions == 1
    assert (cache.lookups, cache.hits, cache.misses) == (3, 2, 1)
    assert not cache.put(b"huge", huge)  # larger than all of it
    assert len(cache) == 3 and cache.utilization() == 1.0
    assert cache.put(b"a", one) and cache.used == 3 * one.size  # replaced, not counted twice
    for index in range(1000):  # many different requests never take more than the bound
        cache.put(index.to_bytes(4, "little"), one)
        assert cache.used <= cache.capacity


def test_cache_config_as_triton_takes_it() -> None:
    assert parse_settings([]).response_cache_bytes() is None
    assert parse_settings(["--cache-config=local,size=1048576"]).response_cache_bytes() == 1048576
    assert parse_settings(["--cache-config", "local,size=0", "--cache-directory", "/opt/x"]).response_cache_bytes() == 0
    for bad in ("redis,host=localhost", "local,size=lots", "local,size=-1", "local,bytes=5"):
        with pytest.raises(SystemExit):
            parse_settings([f"--cache-config={bad}"])
