"""KeyedLocks: per-name locks taken in a fixed order, forgotten when idle."""

from __future__ import annotations

import asyncio

import pytest
from ensemble_runtime.keyed_locks import KeyedLocks

pytestmark = pytest.mark.asyncio


async def test_disjoint_names_do_not_wait_and_idle_names_leave_nothing() -> None:
    locks = KeyedLocks()
    async with locks.hold(["a"]):
        async with asyncio.timeout(5):  # "b" is free while "a" is held
            async with locks.hold(["b"]):
                assert locks.busy("a") and locks.busy("b")
    assert len(locks) == 0


async def test_overlapping_sets_in_any_order_do_not_deadlock() -> None:
    locks = KeyedLocks()
    order: list[str] = []

    async def worker(names: list[str], label: str) -> None:
        for _ in range(50):
            async with locks.hold(names):
                order.append(label)
                await asyncio.sleep(0)

    async with asyncio.timeout(10):
        await asyncio.gather(worker(["ens", "a", "b"], "x"), worker(["b", "a"], "y"), worker(["a"], "z"))
    assert len(order) == 150 and len(locks) == 0


async def test_a_cancelled_waiter_releases_its_claims() -> None:
    locks = KeyedLocks()
    async with locks.hold(["a"]):
        waiter = asyncio.get_running_loop().create_task(locks.hold(["a", "b"]).__aenter__())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert not locks.busy("b")
    assert len(locks) == 0
