"""CPU time of a process and all its descendants, from /proc (Triton's python-backend stubs are child processes)."""

from __future__ import annotations

import os
from pathlib import Path


def stat_fields(text: str) -> list[str]:
    """The fields of a /proc `stat` file after the command name (field 3 onwards of stat(5)); the name itself
    may hold spaces and parentheses, so it ends at the last ')'."""
    return text.rsplit(")", 1)[1].split()


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (field 3 onwards), or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return stat_fields(text)


def descendants(root: int) -> list[int]:
    """`root` and every process below it (children, grandchildren...), from the parent ids in /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, ()))
    return found


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds of `root` and its live descendants (all their threads), from utime + stime."""
    ticks = 0
    for pid in descendants(root):
        fields = _stat_fields(pid)
        if fields is not None:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat(5)
    return ticks / os.sysconf("SC_CLK_TCK")
