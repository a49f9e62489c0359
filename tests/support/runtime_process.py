"""A real `ensemble-runtime` process on free loopback ports, for integration tests and benchmarks."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.server_process import ServerProcess

REPO_ROOT = Path(__file__).resolve().parents[2]
# ENSEMBLE_TEST_GRPC_FRONTEND=grpcio runs every runtime process of a test run with grpcio's gRPC front end
# (a test that passes --grpc-frontend itself keeps its own).
FRONTEND_ENV = "ENSEMBLE_TEST_GRPC_FRONTEND"
HTTP_FRONTEND_ENV = "ENSEMBLE_TEST_HTTP_FRONTEND"  # the same for --http-frontend (native, aiohttp)
# ENSEMBLE_TEST_NATIVE_THREADS=N gives both native cores N threads (0: the event loop's thread drives them)
NATIVE_THREADS_ENV = "ENSEMBLE_TEST_NATIVE_THREADS"


class RuntimeProcess(ServerProcess):
    """Starts the runtime with the given flags; `wait_live` polls ServerLive with a deadline."""

    label = "runtime"

    def __init__(self, repositories: Sequence[Path | str], extra_args: Sequence[str] = (), env: dict[str, str] | None = None) -> None:
        super().__init__()
        for env_name, flag in ((FRONTEND_ENV, "--grpc-frontend"), (HTTP_FRONTEND_ENV, "--http-frontend"),
                               (NATIVE_THREADS_ENV, "--grpc-native-threads"),
                               (NATIVE_THREADS_ENV, "--http-native-threads")):
            value = os.environ.get(env_name)
            if value and not any(a.startswith(flag) for a in extra_args):
                extra_args = [f"{flag}={value}", *extra_args]
        self.args = [
            sys.executable, "-m", "ensemble_runtime",
            *(f"--model-repository={r}" for r in repositories),
            *self.ports_args(),
            *extra_args,
        ]
        self.env = {**os.environ, **(env or {})}
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO_ROOT / "contract"), str(REPO_ROOT / "runtime"), str(REPO_ROOT / "examples"), self.env.get("PYTHONPATH", "")]
        )

    def command(self) -> tuple[Sequence[str], Mapping[str, str]]:
        return self.args, self.env
