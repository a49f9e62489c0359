"""The demo's load (`python -m ensemble_examples.load`) against the real runtime serving dual_classifier."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from ensemble_examples import digits, load
from ensemble_examples.repository import build_repository

from tests.support.ports import free_port
from tests.unit.examples.in_process import serving_in_process

DUAL_SET = "classifier_a:1,classifier_b:1,combine_argmax:1,image_preprocess:1"


def test_load_counts_requests_by_the_version_set_that_answered(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    build_repository(repo, only=["dual_classifier"])
    held_out = tmp_path / "held_out.npz"
    digits.save(digits.split().held_out.take(8), held_out)
    port = free_port()
    out = io.StringIO()

    async def run() -> int:
        async with serving_in_process(repo, port):
            argv = ["--url", f"127.0.0.1:{port}", "--model", "dual_classifier", "--seconds", "2",
                    "--workers", "2", "--report-every", "1", "--digits", str(held_out)]  # fmt: skip
            return await asyncio.to_thread(load.main, argv, out)

    status = asyncio.run(run())
    text = out.getvalue()
    summary = load.parse_summary(text)
    assert status == 0, text
    assert summary is not None
    assert summary["requests"] > 0 and summary["failed"] == 0 and summary["wrong"] == 0
    assert summary["version_sets"] == {DUAL_SET: summary["requests"]}
    assert text.count("\nt=") + text.startswith("t=") >= 1  # progress before the summary


def test_load_reports_failures_without_stopping(tmp_path: Path) -> None:
    """Nobody listening: every request fails, each is counted, and the exit status says so."""
    out = io.StringIO()
    pictures = load.pictures(digits.split().held_out, 2)
    summary = load.run(f"127.0.0.1:{free_port()}", "dual_classifier", pictures, 1.0, 1, 0.5, out)
    assert summary["requests"] == summary["failed"] > 0 and summary["version_sets"] == {}
    assert load.parse_summary(out.getvalue()) == summary


def test_parse_summary_finds_the_last_summary_line() -> None:
    assert load.parse_summary("t=1\nnothing yet") is None
    assert load.parse_summary('SUMMARY {"requests": 1}\nSUMMARY {"requests": 2}\n') == {"requests": 2}
