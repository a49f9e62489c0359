"""A streamed ensemble request keeps the version set it started on for all its responses, through a rollover
that happens while it is still streaming (a real runtime in poll mode, a new version of a step dropped in)."""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from pathlib import Path

import numpy as np

from tests.integration.decoupled.streams import DEADLINE_S, Stream, tensor
from tests.support.runtime_process import RuntimeProcess

MODELS = Path(__file__).parent / "models"


def _served(proc: RuntimeProcess, ensemble: str) -> dict[str, int]:
    with urllib.request.urlopen(f"http://{proc.http_url}/v2/ensembles/{ensemble}/versions", timeout=10) as answer:
        versions: dict[str, int] = json.load(answer)["versions"]
        return versions


def test_a_stream_keeps_its_version_set_through_a_rollover(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(MODELS, repo)
    release = tmp_path / "release"
    with (repo / "held_repeat" / "config.pbtxt").open("a") as config:
        config.write(f'parameters {{ key: "RELEASE_FILE" value: {{ string_value: "{release}" }} }}\n')
    text = [1, 2, 3, 4]
    with RuntimeProcess([repo], ["--model-control-mode=poll", "--repository-poll-secs=0.2"]) as proc:
        proc.wait_ready()
        with Stream(proc.grpc_url) as stream:
            stream.send("held_pipeline", [tensor("TEXT", np.array(text, np.int32), "INT32")], "held", empty_final=True)
            first = stream.next()  # the generator now holds its other tokens until `release` exists
            new_version = repo / "stream_post" / "2"
            new_version.mkdir()
            source = (repo / "stream_post" / "1" / "model.py").read_text()
            (new_version / "model.py").write_text(source.replace("(token + 1)", "(token + 100)"))
            deadline = time.monotonic() + DEADLINE_S
            while _served(proc, "held_pipeline").get("stream_post") != 2:  # the switch, while we stream
                assert time.monotonic() < deadline, "stream_post version 2 was never served"
                time.sleep(0.05)
            release.touch()
            rest = stream.until_final()
            stream.send("held_pipeline", [tensor("TEXT", np.array([5], np.int32), "INT32")], "after", empty_final=True)
            after = [m for m in stream.until_final() if m.outputs]
    responses = [first, *(m for m in rest if m.outputs)]
    assert [m.outputs["WORD"] for m in responses] == [[t + 1] for t in text]  # all computed by version 1
    assert {m.parameters["ensemble_versions"] for m in responses if m.parameters} == {"held_repeat:1,stream_post:1"}
    assert [(m.outputs["WORD"], m.parameters and m.parameters["ensemble_versions"]) for m in after] == [
        ([105], "held_repeat:1,stream_post:2")]  # a new request gets the new set
