"""The demo client against the real runtime serving the generated repository over gRPC, in process."""

from __future__ import annotations

import asyncio
import io
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from ensemble_examples import client, digit_classifiers, digits, onnx_models
from ensemble_examples.repository import build_repository
from onnx import numpy_helper

from tests.support.ports import free_port
from tests.unit.examples.in_process import serving_in_process


async def serve_and_run_client(repo: Path, port: int, out: io.StringIO, argv: list[str] | None = None) -> int:
    async with serving_in_process(repo, port):
        argv = argv if argv is not None else ["--url", f"127.0.0.1:{port}"]
        return await asyncio.to_thread(client.main, [*argv, "--ready-timeout", "30"], out)


def test_client_passes_every_check_against_the_runtime(example_repo: Path) -> None:
    out = io.StringIO()
    status = asyncio.run(serve_and_run_client(example_repo, free_port(), out))
    text = out.getvalue()
    assert status == 0, text
    assert f"{len(client.CHECKS)}/{len(client.CHECKS)} checks passed" in text
    assert "route 1 -> model_b" in text
    assert "FAILED" not in text
    for name in ("classifier_a (top-1)", "classifier_a alone", "classifier_b alone", "ensemble (dual_classifier)"):
        assert re.search(rf"{re.escape(name)} +\d+/450 right +\d+\.\d%", text), name
    assert re.search(r"held-out sentences +\d+/28 right", text)
    assert "trained on 108 short reviews the project wrote" in text
    assert "negative 'a dull, slow and forgettable evening'" in text
    results = re.findall(r"^RESULT (\w+): (.*)$", text, re.MULTILINE)
    assert [name for name, _ in results] == [check.name for check in client.CHECKS]
    dual = dict(results)["dual_classifier"]
    assert re.fullmatch(r"classifier_a alone .*%; classifier_b alone .*%; ensemble \(dual_classifier\) .*%", dual)


def test_targets_run_only_the_named_checks_with_digits_from_a_file(example_repo: Path, tmp_path: Path) -> None:
    """As the demo's pod runs it: no scikit-learn needed for the data (a file of held-out digits, here only the
    first 40), each check against its own server."""
    few = tmp_path / "held_out.npz"
    digits.save(digits.split().held_out.take(40), few)
    port = free_port()
    url = f"127.0.0.1:{port}"
    argv = ["--digits", str(few), "--target", f"dual_classifier={url}", "--target", f"ocr_pipeline={url}"]
    out = io.StringIO()
    status = asyncio.run(serve_and_run_client(example_repo, port, out, argv))
    text = out.getvalue()
    assert status == 0, text
    assert [line.split(":")[0] for line in text.splitlines() if line.startswith("RESULT")] == [
        "RESULT dual_classifier", "RESULT ocr_pipeline"
    ]
    assert re.search(r"classifier_b alone +\d+/40 right", text)
    assert "2/2 checks passed" in text and "repository index" not in text


def test_setting_names_models_as_kubernetes_resources_when_asked() -> None:
    assert client.Setting().name("dual_classifier") == "dual_classifier"
    assert client.Setting(kubernetes_names=True).name("dual_classifier") == "dual-classifier"


def test_a_target_must_name_a_check() -> None:
    with pytest.raises(SystemExit):
        client.main(["--target", "no_such_check=127.0.0.1:1"], io.StringIO())


def test_a_classifier_that_does_not_read_digits_fails_its_check(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    build_repository(repo)
    onnx_models.save(untrained_classifier(), repo / "classifier_b" / "1" / "model.onnx")
    out = io.StringIO()
    status = asyncio.run(serve_and_run_client(repo, free_port(), out))
    text = out.getvalue()
    assert status == 1, text
    assert re.search(r"FAILED: dual_classifier: accuracy under the 90% floor on held-out data: classifier_b alone", text)
    assert f"{len(client.CHECKS) - 1}/{len(client.CHECKS)} checks passed" in text  # the others still pass


def untrained_classifier() -> onnx.ModelProto:
    """classifier_b's graph with its weights replaced by seeded noise: the interface holds, the reading does not."""
    model = digit_classifiers.classifier_b()
    rng = np.random.default_rng(0)
    for tensor in model.graph.initializer:
        noise = rng.standard_normal(numpy_helper.to_array(tensor).shape).astype(np.float32)
        tensor.CopyFrom(numpy_helper.from_array(noise, tensor.name))
    return model


def test_client_exits_2_when_no_server_answers() -> None:
    out = io.StringIO()
    assert client.main(["--url", f"127.0.0.1:{free_port()}", "--ready-timeout", "0"], out) == 2
    assert "not ready" in out.getvalue()
