"""Shared parts of the example-parity tests: a pair of servers (ours and the real Triton) on one repository
of `ensemble_examples.triton_repository`, and the checks NVIDIA's examples make on `simple`'s answers.

Each test module starts one pair for its family of examples (`serve`), and each test runs once per server
(the `server` fixture of conftest.py); the Triton half is skipped where tools/setup-triton.sh has not run.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from ensemble_examples.triton_repository import build_triton_examples

from bench.triton_peer import TritonPeer, not_installed_reason
from tests.support.runtime_process import RuntimeProcess
from tests.support.server_process import ClientTls, ServerProcess

SERVERS = ("ours", "triton")
TRITON_MISSING = not_installed_reason()
LOAD_DEADLINE_S = 180.0  # Python models start one stub process each on Triton: generous for a busy machine


def wait_loaded(server: ServerProcess, names: Sequence[str], timeout: float = LOAD_DEADLINE_S) -> None:
    """Until every model of `names` has finished loading (READY, or UNAVAILABLE with a reason)."""
    deadline = time.monotonic() + timeout
    with server.grpc_client() as client:
        while True:
            states = {m.name: m.state for m in client.get_model_repository_index().models}
            if all(states.get(name) in ("READY", "UNAVAILABLE") for name in names):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{server.label}: models not loaded after {timeout}s: {states}")
            time.sleep(0.1)


@contextlib.contextmanager
def serve(root: Path, models: Sequence[str], args: Sequence[str] = (), *, wait: bool = True,
          client_tls: ClientTls | None = None) -> Iterator[dict[str, ServerProcess]]:
    """Ours (with --server-name=triton, as the health examples need) and, when installed, the real Triton,
    both serving the example models `models` written under `root`; `client_tls`: how the harness reaches them
    where `args` serve gRPC over TLS."""
    build_triton_examples(root, models)

    def started(server: ServerProcess) -> ServerProcess:
        server.client_tls = client_tls
        return stack.enter_context(server)

    with contextlib.ExitStack() as stack:
        servers: dict[str, ServerProcess] = {"ours": started(RuntimeProcess([root], [*args, "--server-name=triton"]))}
        if TRITON_MISSING is None:
            servers["triton"] = started(TritonPeer([root], args))
        if wait:
            for server in servers.values():
                wait_loaded(server, models)
        yield servers


# ---- `simple`: the add/sub model most examples call ---------------------------------------------------

def simple_data(input1_fill: int = 1) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]:
    """The examples' INPUT0 (0..15) and INPUT1 (all ones, or -1 in the HTTP examples), shape [1, 16]."""
    return (np.expand_dims(np.arange(16, dtype=np.int32), 0),
            np.full((1, 16), input1_fill, dtype=np.int32))


def simple_inputs(module: Any, in0: npt.NDArray[Any], in1: npt.NDArray[Any], binary: tuple[bool, bool] | None = None,
                  datatype: str = "INT32") -> list[Any]:
    inputs = [module.InferInput("INPUT0", list(in0.shape), datatype), module.InferInput("INPUT1", list(in1.shape), datatype)]
    for tensor, data, flag in zip(inputs, (in0, in1), binary or (None, None), strict=True):
        if flag is None:
            tensor.set_data_from_numpy(data)
        else:
            tensor.set_data_from_numpy(data, binary_data=flag)
    return inputs


def check_sum_and_difference(result: Any, in0: npt.NDArray[Any], in1: npt.NDArray[Any]) -> None:
    """What every `simple` example checks: OUTPUT0[0][i] = in0 + in1 and OUTPUT1[0][i] = in0 - in1."""
    out0, out1 = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    for i in range(16):
        assert in0[0][i] + in1[0][i] == out0[0][i], ("incorrect sum", i, out0)
        assert in0[0][i] - in1[0][i] == out1[0][i], ("incorrect difference", i, out1)

