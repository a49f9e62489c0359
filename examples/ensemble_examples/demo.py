"""`make demo`: build the example repository, serve it with ensemble-runtime, run the client, stop.

Everything is local: the ONNX models are generated, the runtime listens on loopback ports chosen here.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ensemble_examples.repository import build_repository

DEFAULT_REPOSITORY = Path(__file__).resolve().parents[1] / "model_repository"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_live(proc: subprocess.Popen[bytes], url: str, timeout: float) -> None:
    import tritonclient.grpc as grpcclient

    deadline = time.monotonic() + timeout
    with grpcclient.InferenceServerClient(url) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"ensemble-runtime exited with code {proc.returncode}")
            try:
                if client.is_server_live():
                    return
            except Exception:  # not listening yet
                pass
            time.sleep(0.1)
    raise SystemExit(f"ensemble-runtime not live after {timeout}s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    args = parser.parse_args(argv)
    models = build_repository(args.repository)
    print(f"built example repository {args.repository} ({len(models)} models)", flush=True)
    grpc_port, http_port, metrics_port = _free_port(), _free_port(), _free_port()
    url = f"127.0.0.1:{grpc_port}"
    log_path = args.repository.parent / "demo-runtime.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ensemble_runtime", f"--model-repository={args.repository}",
             "--grpc-address=127.0.0.1", f"--grpc-port={grpc_port}", "--http-address=127.0.0.1",
             f"--http-port={http_port}", "--metrics-address=127.0.0.1", f"--metrics-port={metrics_port}"],
            stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy(),
        )
        try:
            _wait_live(proc, url, 60.0)
            print(f"ensemble-runtime serving on {url} (log: {log_path})", flush=True)
            code = subprocess.call([sys.executable, "-m", "ensemble_examples.client", "--url", url])
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    print("demo finished" if code == 0 else f"demo client failed with code {code}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
