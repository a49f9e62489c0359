"""What answers a gRPC peer never reads cost the runtime: its resident memory while they wait, and after.

    python bench/unread_answers.py [--send-timeout 10] [--calls 32] [--mib 8] [--rounds 3] [--window open|zero]

Each round opens one gRPC connection and asks, in `--calls` ModelInfer calls of a few dozen bytes each, for answers
of `--mib` MiB (a python model, `big`, that returns that many FP32 ones), then reads none of them: `--window open`
grants HTTP/2 the widest window, so only TCP holds the answers back (the peer's reads stopped); `--window zero`
opens with a zero window, so HTTP/2 lets nothing out while the peer reads every frame (a client library's stream
whose application stopped reading). Reported per round: the server's resident memory over its start 3 s after the
calls (all answered by then), and once the server closed the connection (or 25 s passed), with whether it did.
Rounds go on without closing the earlier connections. Writes bench/results/unread_answers.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` and `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import h2.settings
import numpy as np
from tritonclient.grpc import service_pb2 as pb

from bench.common import write_json
from tests.support import raw_grpc
from tests.support.grpc_port import MODEL_INFER
from tests.support.liveness import memory_kib
from tests.support.runtime_process import RuntimeProcess
from tests.support.sockets import server_keeps

CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "n" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "n").as_numpy()[0])
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("y", np.ones(n, np.float32))]))
        return out
"""
SETTLE = 3.0  # seconds for the calls to be answered
WAIT = 25.0  # the longest a round waits for the server to close its connection


def build_repository(root: Path) -> Path:
    (root / "big" / "1").mkdir(parents=True)
    (root / "big" / "config.pbtxt").write_text(CONFIG)
    (root / "big" / "1" / "model.py").write_text(MODEL)
    return root


def open_connection(url: str, window: str) -> raw_grpc.RawConnection:
    connection = raw_grpc.RawConnection(url, 60).__enter__()
    if window == "zero":
        connection.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    else:
        connection.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1})
        connection.conn.increment_flow_control_window(2**31 - 1 - 65535)
    connection.sock.sendall(connection.conn.data_to_send())
    return connection


def measure(args: argparse.Namespace) -> dict[str, Any]:
    request = pb.ModelInferRequest(model_name="big",
                                   raw_input_contents=[np.array([args.mib * 262144], np.int64).tobytes()])
    request.inputs.add(name="n", datatype="INT64", shape=[1])
    message = raw_grpc.frame(request.SerializeToString())
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, \
            RuntimeProcess([build_repository(Path(tmp))], ["--grpc-frontend=native",
                                                            f"--grpc-send-timeout-secs={args.send_timeout}"]) as proc:
        proc.wait_ready()
        proc.wait_model_ready("big")
        pid = proc.pid
        base = memory_kib(pid, "VmRSS")
        connections = []
        for number in range(1, args.rounds + 1):
            connection = open_connection(proc.grpc_url, args.window)
            connections.append(connection)
            for _ in range(args.calls):
                connection.start(connection.open_call(MODEL_INFER), [message])
            started = time.monotonic()
            time.sleep(SETTLE)
            waiting = memory_kib(pid, "VmRSS")
            while server_keeps(connection.sock) and time.monotonic() - started < WAIT:
                time.sleep(0.5)
            closed = not server_keeps(connection.sock)
            after = time.monotonic() - started
            time.sleep(1.0)
            row = {"round": number, "request_bytes": len(message), "calls": args.calls, "answer_mib": args.mib,
                   "rss_mib_waiting": round((waiting - base) / 1024), "closed_by_server": closed,
                   "seconds": round(after, 1), "rss_mib_after": round((memory_kib(pid, "VmRSS") - base) / 1024)}
            print(f"round {number}: {args.calls} calls of {len(message)} bytes for {args.mib} MiB each, window "
                  f"{args.window}: +{row['rss_mib_waiting']} MiB {SETTLE:.0f} s after; "
                  f"{'closed by the server' if closed else 'still open'} at {after:.1f} s, then "
                  f"+{row['rss_mib_after']} MiB", flush=True)
            rounds.append(row)
        for connection in connections:
            connection.__exit__()
    return {"send_timeout_secs": args.send_timeout, "window": args.window, "rounds": rounds}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--send-timeout", type=float, default=10.0, help="the runtime's --grpc-send-timeout-secs")
    parser.add_argument("--calls", type=int, default=32)
    parser.add_argument("--mib", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", choices=["open", "zero"], default="open")
    parser.add_argument("--json", type=Path, help="default: bench/results/unread_answers.json")
    args = parser.parse_args(argv)
    print(f"wrote {write_json('unread_answers', measure(args), args.json)}")


if __name__ == "__main__":
    main()
