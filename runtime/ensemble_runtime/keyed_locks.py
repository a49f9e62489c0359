"""One asyncio lock per model name, taken in a fixed order, and forgotten once nobody holds or waits for it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field


@dataclass
class _Entry:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0  # holders and waiters


@dataclass
class KeyedLocks:
    """`hold(names)` takes the lock of every name, in sorted order (so two holders of overlapping sets
    never deadlock); a name nobody holds or waits for keeps no entry, so unknown names leave nothing behind."""

    _entries: dict[str, _Entry] = field(default_factory=dict)

    @contextlib.asynccontextmanager
    async def hold(self, names: Iterable[str]) -> AsyncIterator[None]:
        ordered = sorted(set(names))
        entries = [self._entries.setdefault(name, _Entry()) for name in ordered]
        for entry in entries:
            entry.users += 1
        acquired: list[_Entry] = []
        try:
            for entry in entries:
                await entry.lock.acquire()
                acquired.append(entry)
            yield
        finally:
            for entry in reversed(acquired):
                entry.lock.release()
            for name, entry in zip(ordered, entries, strict=True):
                entry.users -= 1
                if entry.users == 0 and self._entries.get(name) is entry:
                    del self._entries[name]

    def busy(self, name: str) -> bool:
        """Whether some operation holds or waits for this name's lock."""
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)
