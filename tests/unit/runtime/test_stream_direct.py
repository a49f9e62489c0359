"""A stream's `Gate` and `DirectSend` at their seam with the native core (a stand-in window of a few messages that
the test drains as a client reading would): messages offered from model threads keep each request's order
through a full window, nothing passes a message waiting in the backlog, and the gate bounds the requests in
flight across threads."""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Any, cast

import pytest
from ensemble_runtime.protocol.native_stream import FULL, SENT, Outlet
from ensemble_runtime.protocol.stream_direct import DirectSend
from ensemble_runtime.protocol.stream_gate import Gate

pytestmark = pytest.mark.asyncio
WAIT = 30.0  # a loaded machine's margin: nothing must hang, not be fast
CLOSED = 2


class Window:
    """The core's side of one stream: at most `size` messages wait for the client; `closed` ends the stream."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.waiting: list[Any] = []
        self.read: list[Any] = []
        self.closed = False
        self.lock = threading.Lock()

    def send(self, message: Any) -> int:
        with self.lock:
            if self.closed:
                return CLOSED
            if len(self.waiting) >= self.size:
                return FULL
            self.waiting.append(message)
            return SENT

    def drain(self) -> int:
        with self.lock:
            taken = len(self.waiting)
            self.read.extend(self.waiting)
            self.waiting.clear()
            return taken


def _direct(window: Window, gate: Gate) -> tuple[DirectSend, Outlet]:
    outlet = Outlet(cast(Any, window))
    return DirectSend(window.send, outlet, gate, asyncio.get_running_loop()), outlet


def _token(name: str, index: int) -> bytes:
    """The message a model's thread sends: which request, and its place in that request's answers."""
    return f"{name} {index}".encode()


async def _read_until(window: Window, outlet: Outlet, done: threading.Event) -> None:
    """A client reading the stream: takes what waits and tells the sender there is room, until `done`."""
    while True:
        if window.drain():
            outlet.writable()
        if done.is_set() and not window.waiting:
            return
        await asyncio.sleep(0.001)


async def test_each_requests_order_holds_through_a_full_window() -> None:
    window = Window(size=3)
    gate = Gate(8, asyncio.get_running_loop())
    direct, outlet = _direct(window, gate)
    ended: list[str] = []
    finished = threading.Event()

    def end(name: str) -> None:  # where the last message of a request went out (a model's thread or the loop)
        ended.append(name)
        if len(ended) == 2:
            finished.set()

    def model(name: str, count: int) -> None:  # a model's thread sending a request's responses, then its end
        for index in range(count):
            last = index == count - 1
            direct.send(functools.partial(_token, name, index), 0, (lambda: end(name)) if last else None)

    threads = [threading.Thread(target=model, args=(name, 200), daemon=True) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    await asyncio.wait_for(_read_until(window, outlet, finished), WAIT)
    read = [message.decode().split() for message in window.read]
    for name in ("a", "b"):
        assert [int(i) for n, i in read if n == name] == list(range(200))
    assert sorted(ended) == ["a", "b"]  # each end once, after its request's last message went out


async def test_an_end_waits_for_the_messages_queued_before_it() -> None:
    window = Window(size=1)
    gate = Gate(8, asyncio.get_running_loop())
    direct, outlet = _direct(window, gate)
    ended: list[int] = []
    direct.send(lambda: b"first", 0, None)  # fills the window
    direct.send(lambda: b"second", 0, None)  # waits in the backlog
    direct.send(None, 0, lambda: ended.append(len(window.read) + len(window.waiting)))  # no message: only an end
    await asyncio.sleep(0.01)
    assert ended == []  # "second" has not gone out yet
    for _ in range(int(WAIT * 100)):  # a client reading until the end was called
        if window.drain():
            outlet.writable()
        if ended:
            break
        await asyncio.sleep(0.01)
    window.drain()
    assert window.read == [b"first", b"second"]
    assert ended == [2]


async def test_a_closed_stream_gives_up_the_gate_and_takes_nothing_more() -> None:
    window = Window(size=4)
    gate = Gate(2, asyncio.get_running_loop())
    direct, _ = _direct(window, gate)
    assert await gate.enter()
    window.closed = True
    ended: list[bool] = []
    await asyncio.to_thread(direct.send, lambda: b"lost", 0, lambda: ended.append(True))
    await asyncio.wait_for(gate.settled(), WAIT)  # returns: the client is gone
    assert gate.gone
    assert not await gate.enter()
    window.closed = False
    direct.send(lambda: b"after", 0, lambda: ended.append(True))
    assert window.waiting == [] and ended == []


async def test_the_gate_holds_the_session_until_a_thread_leaves() -> None:
    gate = Gate(2, asyncio.get_running_loop())
    assert await gate.enter()
    assert await gate.enter()
    third = asyncio.get_running_loop().create_task(gate.enter())
    await asyncio.sleep(0.01)
    assert not third.done()  # at its limit
    await asyncio.to_thread(gate.leave)  # a model's thread ends a request
    assert await asyncio.wait_for(third, WAIT)
    settled = asyncio.get_running_loop().create_task(gate.settled())
    await asyncio.to_thread(gate.leave)
    await asyncio.sleep(0.01)
    assert not settled.done()  # one still in flight
    await asyncio.to_thread(gate.leave)
    await asyncio.wait_for(settled, WAIT)
