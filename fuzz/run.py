"""Runs every fuzz target for a bounded time from its committed seed corpus; exit status 1 if any found something.

    python -m fuzz.run [--seconds 60] [--artifacts DIR] [target ...]      (`make fuzz`, FUZZ_SECONDS=...)

New corpus entries go to a scratch directory, never into fuzz/corpus; a finding's input is written to
DIR/<target>-crash-<sha1> (replay: python -m fuzz.<target> DIR/<target>-crash-...).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TARGETS = ("fuzz_grpc_decode", "fuzz_http_decode", "fuzz_config")
RSS_LIMIT_MB = 1024  # per process: an input that makes the codec allocate past this is a finding
INPUT_TIMEOUT_S = 10  # per input: a slow input is a finding


@dataclass(frozen=True)
class Outcome:
    target: str
    returncode: int
    log_tail: str
    artifacts: list[Path]

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.artifacts


def run_target(target: str, seconds: int, artifacts: Path) -> Outcome:
    artifacts.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "contract"), str(ROOT / "runtime"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory(prefix=f"{target}-corpus-") as scratch:
        command = [
            sys.executable, "-m", f"fuzz.{target}", scratch, str(HERE / "corpus" / target),
            f"-max_total_time={seconds}", f"-rss_limit_mb={RSS_LIMIT_MB}", f"-timeout={INPUT_TIMEOUT_S}",
            f"-artifact_prefix={artifacts}/{target}-", "-print_final_stats=1",
        ]
        done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, errors="replace",
                              timeout=seconds + 120, check=False)
    found = sorted(artifacts.glob(f"{target}-*"))
    log = done.stdout + done.stderr
    start = log.find("=== Uncaught Python exception")  # the finding's traceback, else the end of the log
    return Outcome(target, done.returncode, log[start : start + 6000] if start >= 0 else log[-6000:], found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=int(os.environ.get("FUZZ_SECONDS", "60")))
    parser.add_argument("--artifacts", type=Path, default=None)
    parser.add_argument("targets", nargs="*", default=list(TARGETS))
    args = parser.parse_args()
    artifacts = args.artifacts or Path(tempfile.mkdtemp(prefix="fuzz-findings-"))
    failed = False
    for target in args.targets:
        outcome = run_target(target, args.seconds, artifacts)
        print(f"{target}: {'ok' if outcome.ok else 'FINDING'} (rc {outcome.returncode}, {args.seconds} s)")
        if not outcome.ok:
            failed = True
            print(outcome.log_tail)
            for path in outcome.artifacts:
                print(f"  input: {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
