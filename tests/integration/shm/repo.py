"""The repository the shared memory tests serve (to the runtime and to the real Triton): `simple` and
`simple_string` with the names, types and shapes Triton's client examples expect."""

from __future__ import annotations

import shutil
from pathlib import Path

MODELS = Path(__file__).parent / "models"


def _config(name: str, data_type: str) -> str:
    def tensors(prefix: str) -> str:
        return ", ".join(f'{{ name: "{prefix}{i}" data_type: {data_type} dims: [ 16 ] }}' for i in (0, 1))

    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n'
        f"input [ {tensors('INPUT')} ]\noutput [ {tensors('OUTPUT')} ]\n"
        'instance_group [ { count: 1 kind: KIND_CPU } ]\n'
    )


def build(root: Path) -> Path:
    for name, data_type in (("simple", "TYPE_INT32"), ("simple_string", "TYPE_STRING")):
        version = root / name / "1"
        version.mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(_config(name, data_type))
        shutil.copy(MODELS / name / "model.py", version / "model.py")
    return root
