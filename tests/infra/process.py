"""Child processes for the test infrastructure: start with a log file, stop without orphans, poll.

Every server the fixtures run (etcd, kube-apiserver, MinIO, ...) is a `ManagedProcess`: its stdout and
stderr go to one log file, it runs in its own process group (so SIGTERM/SIGKILL reach anything it forks),
and it is asked to die with the test process (PR_SET_PDEATHSIG) should pytest itself be killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TypeVar

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1


class StartupError(RuntimeError):
    """A server did not come up; the message carries the tail of its log."""


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _death_signal_hook() -> Callable[[], None] | None:
    """A preexec_fn asking the kernel to SIGKILL the child when the spawning thread dies.

    Only for spawns from the main thread: the signal follows the *thread*, so a child started from a
    worker thread would die with that thread. libc is loaded here, in the parent: the child may only
    make the system call.
    """
    libc = _libc()
    if libc is None or threading.current_thread() is not threading.main_thread():
        return None

    def hook() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    return hook


def tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a (log) file, or a note that it is missing."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"<{path} does not exist>"
    return "\n".join(text.splitlines()[-lines:])


class ManagedProcess:
    """One long-running child process whose output goes to `log_path`."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str | os.PathLike[str]],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = [os.fspath(a) for a in argv]
        self.log_path = log_path
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        if self.running:
            raise RuntimeError(f"{self.name} is already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log.write(f"\n===== starting: {' '.join(self.argv)}\n".encode())
        self._log.flush()
        self._proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self._env,
            cwd=self._cwd,
            start_new_session=True,
            preexec_fn=_death_signal_hook(),
        )

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log_path, lines)

    def check_alive(self) -> None:
        """Raise `StartupError` (with the log tail) if the process has exited."""
        if self._proc is not None and self._proc.poll() is not None:
            raise StartupError(
                f"{self.name} exited with code {self._proc.returncode}; "
                f"last lines of {self.log_path}:\n{self.log_tail()}"
            )

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL it if it is still there after `timeout` seconds."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                self._signal_group(proc, signal.SIGTERM)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self._signal_group(proc, signal.SIGKILL)
                    proc.wait(timeout=timeout)
            # Whatever the leader forked and left behind in its group.
            self._signal_group(proc, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None

    @staticmethod
    def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)


def poll_until(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.2,
    alive: Sequence[ManagedProcess] = (),
    detail: Callable[[], str] | None = None,
) -> T:
    """Call `probe` until it returns something other than None (or False) and return that.

    Fails fast with `StartupError` when one of `alive` exits, and raises `TimeoutError` after `timeout`
    seconds, with `detail()` (for example a log tail) appended to the message.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        for proc in alive:
            proc.check_alive()
        try:
            result = probe()
        except Exception as exc:  # the probe's failures are what we are waiting out
            last_error = exc
            result = None
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            message = f"timed out after {timeout:.0f}s waiting for {what}"
            if last_error is not None:
                message += f" (last error: {last_error!r})"
            if detail is not None:
                message += "\n" + detail()
            raise TimeoutError(message)
        time.sleep(interval)


def http_status(url: str, *, context: ssl.SSLContext | None = None, timeout: float = 2.0) -> int | None:
    """The HTTP status of GET `url`, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, context=context, timeout=timeout) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return None


def insecure_tls_context() -> ssl.SSLContext:
    """For probing the self-signed health endpoints of controller-manager and scheduler."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context
