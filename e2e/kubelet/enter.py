"""Run inside a container's fresh mount namespace (`unshare --mount --propagation private`): bind the
volumes onto their mountPaths, change to the working directory and exec the container's command.

Standard library only, started as `python -I -S enter.py '<json>'` so it is quick and imports nothing of
the project. Every source is opened (O_PATH) before anything is mounted and bound through
/proc/self/fd/N, so mounting one volume cannot hide another's source: an emptyDir on /tmp must not hide
a ConfigMap's directory that lives under /tmp on the host. The `keep` paths (the project checkout and its
venv, which stand in for the image) are bound back where a volume covers one of their parents.
"""

from __future__ import annotations

import ctypes
import json
import os
import stat
import sys

MS_RDONLY = 0x1
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000


def _mount(libc: ctypes.CDLL, source: str | None, target: str, flags: int) -> None:
    src = source.encode() if source is not None else None
    if libc.mount(src, target.encode(), None, flags, None) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def _mount_point(target: str, is_dir: bool) -> None:
    if is_dir:
        os.makedirs(target, exist_ok=True)
    elif not os.path.exists(target):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "a"):
            pass


def main(spec: dict[str, object]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    mounts = spec["mounts"]
    assert isinstance(mounts, list)
    opened = [(os.open(m["source"], os.O_PATH), m) for m in mounts]  # before any mount hides a source
    keep = spec.get("keep", [])
    assert isinstance(keep, list)
    kept = [(os.open(path, os.O_PATH), path) for path in keep]
    for fd, m in sorted(opened, key=lambda pair: pair[1]["target"].rstrip("/").count("/")):
        _mount_point(m["target"], stat.S_ISDIR(os.fstat(fd).st_mode))
        _mount(libc, f"/proc/self/fd/{fd}", m["target"], MS_BIND | MS_REC)
        if m["read_only"]:
            _mount(libc, None, m["target"], MS_BIND | MS_REMOUNT | MS_RDONLY)
        os.close(fd)
    targets = [m["target"].rstrip("/") + "/" for m in mounts]
    for fd, path in kept:  # the stand-in image: put it back where a volume covered one of its parents
        if any((path.rstrip("/") + "/").startswith(t) for t in targets):
            _mount_point(path, True)
            _mount(libc, f"/proc/self/fd/{fd}", path, MS_BIND | MS_REC)
        os.close(fd)
    working_dir = spec.get("working_dir")
    if isinstance(working_dir, str) and working_dir:
        os.makedirs(working_dir, exist_ok=True)
        os.chdir(working_dir)
    argv = spec["argv"]
    assert isinstance(argv, list)
    os.execvpe(argv[0], argv, dict(os.environ))


if __name__ == "__main__":
    try:
        main(json.loads(sys.argv[1]))
    except OSError as exc:
        print(f"e2e kubelet stand-in: cannot start the container: {exc}", file=sys.stderr)
        sys.exit(127)
