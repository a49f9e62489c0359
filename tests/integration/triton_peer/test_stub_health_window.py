"""The real Triton peer fails a request when its python stub is held for a second: the error
`bench.triton_peer.stub_missed_health_window` recognises, and that `tests.support.peer_requests.peer_request`
turns into a skip of a comparison (a busy machine once did this to `test_traces.py::test_matches_triton`).
Here the stub of chain2's second step is stopped (SIGSTOP) while chain2 is asked for, and let go after."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from bench.models import build_chain_repository
from bench.pa.cpu import descendants
from bench.triton_peer import TritonPeer, not_installed_reason, stub_missed_health_window
from tests.support.peer_requests import peer_request

_REASON = not_installed_reason()
pytestmark = [pytest.mark.triton, pytest.mark.skipif(_REASON is not None, reason=_REASON or "")]
WAIT = 60.0  # seconds: a loaded 2-core machine


def _stubs(server_pid: int, instance: str) -> list[int]:
    """The python backend stubs of `instance` below the server `server_pid`."""
    found = []
    for pid in descendants(server_pid):
        with contextlib.suppress(OSError):
            arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if instance.encode() in arguments and any(a.endswith(b"triton_python_backend_stub") for a in arguments):
                found.append(pid)
    return found


@contextlib.contextmanager
def _held(pids: list[int]) -> Iterator[None]:
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def _ask_chain2(peer: TritonPeer) -> None:
    with grpcclient.InferenceServerClient(peer.grpc_url) as client:
        tensor = grpcclient.InferInput("IN", [16], "FP32")
        tensor.set_data_from_numpy(np.arange(16, dtype=np.float32))
        client.infer("chain2", [tensor], client_timeout=WAIT)


def test_a_held_stub_fails_the_request_with_the_window_recognised(tmp_path: Path) -> None:
    build_chain_repository(tmp_path, [2])
    with TritonPeer([tmp_path]) as peer:
        peer.wait_model_ready("chain2", WAIT)
        stubs = _stubs(peer.pid, "add_one_1_0_0")
        assert len(stubs) == 1, stubs
        with _held(stubs), pytest.raises(InferenceServerException) as failed:
            _ask_chain2(peer)
    assert stub_missed_health_window(str(failed.value)), str(failed.value)
    with pytest.raises(pytest.skip.Exception, match="add_one_1_0_0"), peer_request():
        raise failed.value
