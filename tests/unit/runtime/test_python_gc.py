"""python_gc on this process's own collector: the flag, what a settle does, settles coalesced on the loop. What it
does for a real runtime (an unloaded version's cycles freed, no collection on the serving path) is checked on real
runtime processes (tests/integration/runtime/test_python_gc.py)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest
from ensemble_runtime import python_gc
from ensemble_runtime.python_gc import PythonGc
from ensemble_runtime.settings import parse_settings


@pytest.fixture
def own_collector() -> Iterator[None]:
    """This process's collector as it was, after the test."""
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_the_flag() -> None:
    assert parse_settings([]).python_gc == python_gc.TUNED
    assert parse_settings(["--python-gc=stock"]).python_gc == python_gc.STOCK
    with pytest.raises(SystemExit):
        parse_settings(["--python-gc=off"])
    with pytest.raises(ValueError, match="unknown python gc policy 'off'"):
        PythonGc("off")


class _Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.mark.usefixtures("own_collector")
def test_a_settle_collects_what_was_frozen_and_freezes_what_is_left() -> None:
    keeper = PythonGc()
    kept = _Cycle()
    keeper.settle()
    assert gc.get_freeze_count() > 0 and gc.get_threshold()[0] == python_gc.YOUNG_THRESHOLD
    assert gc.get_threshold()[1:] == (10, 10)  # the older generations' as Python sets them

    frozen = _Cycle()
    keeper.settle()  # alive: frozen
    was_frozen = weakref.ref(frozen)
    del frozen
    gc.collect()  # what is frozen is left alone: a version loaded at start, unloaded
    assert was_frozen() is not None
    keeper.settle()  # thawed first, then collected
    assert was_frozen() is None

    reading = keeper.read()
    assert reading.settles == 3 and reading.settle_seconds > 0 and reading.frozen == gc.get_freeze_count()
    assert len(reading.collections) == 3
    assert kept.me is kept  # what is alive stays


@pytest.mark.usefixtures("own_collector")
def test_stock_does_nothing() -> None:
    thresholds = gc.get_threshold()
    keeper = PythonGc(python_gc.STOCK)
    keeper.settle()
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == thresholds and keeper.read().settles == 0


@pytest.mark.usefixtures("own_collector")
def test_settles_asked_for_in_one_turn_of_the_loop_are_one() -> None:
    keeper = PythonGc()

    async def ask() -> None:
        for _ in range(3):
            keeper.settle_soon()
        assert keeper.settles == 0  # not on the turn that asked
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert keeper.settles == 1
        keeper.settle_soon()
        keeper.settle()  # does what the pending one would: that one is dropped
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert keeper.settles == 2

    asyncio.run(ask())
