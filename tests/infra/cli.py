"""Running the built CLIs (kubectl, helm) with a clean, explicit environment."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


class CommandError(subprocess.CalledProcessError):
    """A CLI failed; unlike CalledProcessError its message includes stdout and stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstdout:\n{self.output}\nstderr:\n{self.stderr}"


def run_cli(
    binary: Path,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    input: str | None = None,
    check: bool = True,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """Run `binary args` with `env` on top of ours minus any KUBE*/HELM_* settings of the developer's."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "HELM_"))}
    full_env.update(env)
    result = subprocess.run(
        [str(binary), *args], input=input, capture_output=True, text=True, env=full_env, timeout=timeout
    )
    if check and result.returncode != 0:
        raise CommandError(result.returncode, result.args, output=result.stdout, stderr=result.stderr)
    return result
