"""A version that kills the process while loading, from S3 through the operator's repository config: after
the restart the load journal keeps it out AND the version to fall back on is there to serve. The sync of an S3
source keeps only the versions the policy picks, so with `latest: 1` version 1 had been removed from the
cache when version 2 arrived: the restarted runtime served nothing (found by the real-node e2e test,
e2e/tests/test_memory_limit.py). Real MinIO, real runtime processes."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from ensemble_runtime.load_journal import DIED_LOADING

from tests.integration.runtime.test_model_exits import CONFIG, MODEL, assert_good_answers, index_of, wait_for
from tests.integration.s3.helpers import S3Helper
from tests.support.runtime_process import RuntimeProcess

pytestmark = [pytest.mark.s3]


def put_version(s3: S3Helper, prefix: str, version: int, how: str) -> None:
    s3.put(f"{prefix}/{version}/model.py", MODEL.read_text())
    s3.put(f"{prefix}/{version}/how.txt", how)
    s3.put(f"{prefix}/{version}/.complete", b"")


def test_a_version_that_killed_the_process_falls_back_to_the_previous_one(s3: S3Helper, tmp_path: Path) -> None:
    prefix = "team/flaky"
    s3.put(f"{prefix}/config.pbtxt", CONFIG)  # default version policy: latest 1
    put_version(s3, prefix, 1, "ok")
    config = tmp_path / "repository.json"
    spec = {"models": [{"name": "flaky", "source": f"s3://models/{prefix}"}], "s3": {"endpoint_url": s3.endpoint_url}}
    config.write_text(json.dumps(spec))
    cache = tmp_path / "cache"
    args = [f"--repository-config={config}", "--model-control-mode=poll", "--repository-poll-secs=0.5",
            "--repository-settle-secs=0.2", f"--model-cache-dir={cache}"]  # fmt: skip

    first = RuntimeProcess([], args)
    first.start(timeout=120)
    first.wait_model_ready("flaky", timeout=120)
    assert_good_answers(first, "flaky", 2.0)  # version 1: X + 1
    put_version(s3, prefix, 2, "initialize:os_exit")  # the next poll loads it, and the process dies
    assert first.proc is not None
    assert first.proc.wait(timeout=120) == 1
    first.stop()
    journal = json.loads((cache / "load-journal").read_text())
    assert [(e["model"], e["version"]) for e in journal["loading"]] == [("flaky", 2)]

    with RuntimeProcess([], args) as proc:
        proc.wait_model_ready("flaky", timeout=120)
        assert_good_answers(proc, "flaky", 2.0)  # version 1 again, fetched back from S3
        entry = index_of(proc)[("flaky", "2")]
        assert (entry["state"], entry["reason"]) == ("UNAVAILABLE", DIED_LOADING)

        put_version(s3, prefix, 2, "ok")  # a fixed upload under the same number: new content, tried again
        proc.wait_model_ready("flaky", timeout=120, version="2")
        wait_for(lambda: index_of(proc).get(("flaky", "1"), {}).get("state") != "READY",  # one read: no race
                 "version 1 retired", proc)
        assert_good_answers(proc, "flaky", 3.0)  # version 2: X + 2
    with contextlib.suppress(FileNotFoundError):
        assert json.loads((cache / "load-journal").read_text())["loading"] == []
