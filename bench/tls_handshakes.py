"""What a TLS handshake costs the runtime, and what handshakes cost the requests served beside them.

    python bench/tls_handshakes.py                       # P-256 and RSA 2048 keys, the core on the loop and on a thread
    python bench/tls_handshakes.py --key rsa --threads 0 --rate 200

For each serving key (`ec`: P-256; `rsa`: RSA 2048, cert-manager's default) and each `--grpc-native-threads`
(0: the event loop's thread drives the core, as where the runtime has one CPU; 1: the core has a thread of its
own), one runtime serves gRPC over TLS, pinned to the first CPU:
- the server's CPU per handshake (/proc), over `--handshakes` fresh TLS connections made one after another from a
  client pinned to the second CPU;
- `chain1` (one python model) at one request in flight, p50 and p99 over `--requests`, alone, then beside a client
  (its own process, on the second CPU) that opens `--rate` new TLS connections a second.
Prints a table; writes bench/results/tls_handshakes.json.
"""

from __future__ import annotations

import argparse
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` and `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import tritonclient.grpc as grpcclient

from bench.common import percentile, write_json
from bench.hotpath import cpu_seconds
from bench.models import build_chain_repository
from bench.pa.servers import tls_setup
from tests.support.runtime_process import RuntimeProcess

MODEL = "chain1"


def handshakes(port: int, ca: Path, count: int | None, rate: float | None) -> int:
    """Opens fresh TLS connections (h2 by ALPN, as gRPC clients ask) and closes each once its handshake is done:
    `count` of them (None: until killed), at most `rate` a second where given."""
    context = ssl.create_default_context(cafile=str(ca))
    context.set_alpn_protocols(["h2"])
    done, began = 0, time.monotonic()
    while count is None or done < count:
        with socket.create_connection(("127.0.0.1", port)) as raw, context.wrap_socket(raw, server_hostname="127.0.0.1"):
            pass
        done += 1
        if rate:
            time.sleep(max(0.0, began + done / rate - time.monotonic()))
    return done


def latencies(client: grpcclient.InferenceServerClient, count: int) -> dict[str, float]:
    item = grpcclient.InferInput("IN", [16], "FP32")
    item.set_data_from_numpy(np.zeros(16, np.float32))
    samples = []
    for _ in range(count):
        began = time.perf_counter()
        client.infer(MODEL, [item])
        samples.append((time.perf_counter() - began) * 1e6)
    return {"p50_us": round(percentile(samples, 50), 1), "p99_us": round(percentile(samples, 99), 1)}


def measure(repository: Path, key: str, threads: int, args: argparse.Namespace, cpus: list[int]) -> dict[str, Any]:
    tls, flags = tls_setup(Path(tempfile.mkdtemp()) / "tls", rsa_key=key == "rsa")
    proc = RuntimeProcess([repository], [f"--grpc-native-threads={threads}", "--strict-readiness=false", *flags])
    proc.client_tls = tls
    proc.start()
    try:
        proc.wait_model_ready(MODEL)
        assert proc.proc is not None
        os.sched_setaffinity(proc.proc.pid, {cpus[0]})
        for thread in Path(f"/proc/{proc.proc.pid}/task").iterdir():  # threads started before the pinning too
            os.sched_setaffinity(int(thread.name), {cpus[0]})
        handshakes(proc.grpc_port, tls.root, 50, None)
        before = cpu_seconds(proc.proc.pid)
        handshakes(proc.grpc_port, tls.root, args.handshakes, None)
        per_handshake = (cpu_seconds(proc.proc.pid) - before) / args.handshakes * 1e6
        with tls.client(proc.grpc_url) as client:
            latencies(client, 200)
            alone = latencies(client, args.requests)
            generator = subprocess.Popen(["taskset", "-c", str(cpus[1]), sys.executable, __file__, "--generate",
                                          str(proc.grpc_port), str(tls.root), str(args.rate)])
            try:
                time.sleep(1.0)  # its first connections: not part of the measure
                beside = latencies(client, args.requests)
            finally:
                generator.kill()
                generator.wait()
    finally:
        proc.stop()
    row = {"key": key, "threads": threads, "server_cpu_us_per_handshake": round(per_handshake, 1),
           "alone": alone, f"beside_{args.rate:g}_handshakes_per_s": beside}
    print(f"{key:3} threads={threads}  {per_handshake:7.1f} us CPU/handshake  c=1 p50/p99 alone "
          f"{alone['p50_us']:.0f}/{alone['p99_us']:.0f} us, beside {args.rate:g}/s "
          f"{beside['p50_us']:.0f}/{beside['p99_us']:.0f} us", flush=True)
    return row


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--generate":  # the load's own process
        handshakes(int(sys.argv[2]), Path(sys.argv[3]), None, float(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--key", action="append", choices=["ec", "rsa"], help="default: both")
    parser.add_argument("--threads", action="append", type=int, choices=[0, 1], help="default: both")
    parser.add_argument("--handshakes", type=int, default=500)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=100.0, help="new TLS connections a second beside the requests")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("needs 2 CPUs: the server on one, the clients on the other")
    os.sched_setaffinity(0, {cpus[1]})
    repository = Path(tempfile.mkdtemp()) / "repo"
    build_chain_repository(repository, lengths=[1])
    rows = [measure(repository, key, threads, args, cpus)
            for key in args.key or ["ec", "rsa"] for threads in args.threads or [0, 1]]
    print("wrote", write_json("tls_handshakes", {"rate": args.rate, "rows": rows}, args.json))


if __name__ == "__main__":
    main()
