"""The CI run of the coverage-guided fuzz targets (fuzz/): each for FUZZ_CI_SECONDS (30 unless set) from its
committed seed corpus; any finding fails the test with its traceback and the input's path.

`make fuzz` runs the same targets for longer (FUZZ_SECONDS, 60 by default).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fuzz import run

SECONDS = int(os.environ.get("FUZZ_CI_SECONDS", "30"))


@pytest.mark.parametrize("target", run.TARGETS)
def test_fuzz_target_finds_nothing(target: str, tmp_path: Path) -> None:
    outcome = run.run_target(target, SECONDS, tmp_path)
    assert outcome.ok, f"{target} (rc {outcome.returncode}), inputs {outcome.artifacts}:\n{outcome.log_tail}"
