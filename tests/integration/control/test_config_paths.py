"""A config override (or config.pbtxt) can only name files inside its model's directory.

Before: `default_model_filename: "../../../outside/evil.py"`, an absolute path, or a symlink leading out made
the server import and run that file as the live model; the errors for other paths told whether a file existed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from ensemble_runtime.errors import quote_name
from tritonclient.utils import InferenceServerException

from tests.integration.control.support import Layout, assert_serves, build, http, load_body
from tests.support.runtime_process import RuntimeProcess


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    return build(tmp_path_factory.mktemp("paths"))


@pytest.fixture(scope="module")
def server(layout: Layout) -> Iterator[RuntimeProcess]:
    with RuntimeProcess([layout.root], ["--model-control-mode=explicit", "--load-model=good"]) as proc:
        proc.wait_model_ready("good")
        yield proc


def _escapes(layout: Layout) -> dict[str, tuple[dict[str, object], str]]:
    """name -> (config fields, the field the error must name)."""
    warmup = {"name": "w", "batch_size": 1,
              "inputs": {"X": {"data_type": "TYPE_FP32", "dims": [2], "input_data_file": "evil.py"}}}
    return {
        "dotdot": ({"default_model_filename": "../../../outside/evil.py"}, "default_model_filename"),
        "absolute": ({"default_model_filename": str(layout.evil)}, "default_model_filename"),
        "symlink": ({"default_model_filename": "link.py"}, "default_model_filename"),
        "cc_dotdot": ({"cc_model_filenames": {"8.0": "../../../outside/evil.py"}}, "cc_model_filenames['8.0']"),
        "label_absolute": ({"output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [2],
                                        "label_filename": "/etc/passwd"}]}, "output 'Y' label_filename"),
        "warmup_symlinked_dir": ({"model_warmup": [warmup]}, "input_data_file"),
        "trt_cache_absolute": ({"optimization": {"execution_accelerators": {"gpu_execution_accelerator": [
            {"name": "tensorrt", "parameters": {"trt_engine_cache_path": "/tmp/engines"}}]}}},
            "trt_engine_cache_path"),
    }


@pytest.mark.parametrize("variant", ["dotdot", "absolute", "symlink", "cc_dotdot", "label_absolute",
                                     "warmup_symlinked_dir", "trt_cache_absolute"])
def test_override_naming_a_path_outside_the_model_is_refused_grpc_and_http(
    server: RuntimeProcess, layout: Layout, variant: str
) -> None:
    fields, field = _escapes(layout)[variant]
    config = layout.override(**fields)

    with server.grpc_client() as client, pytest.raises(InferenceServerException) as refused:
        client.load_model("good", config=config)
    # Triton's answer to a config it refuses at load: INTERNAL / 500 "failed to load '<model>'..."
    assert refused.value.status() == "StatusCode.INTERNAL", refused.value
    assert field in refused.value.message(), refused.value.message()

    status, body = http(server.http_url, "POST", "/v2/repository/models/good/load", load_body(config))
    assert status == 500, body
    assert field in json.loads(body)["error"], body

    assert not layout.marker.exists(), "the file outside the repository ran"
    assert_serves(server.grpc_url)


def test_errors_do_not_tell_whether_a_file_exists(server: RuntimeProcess, layout: Layout) -> None:
    """An existing file and a missing one outside the model give the same answer, bar the path itself."""
    answers = []
    for path in (str(layout.evil), str(layout.evil.with_name("nothing-here.py"))):
        with server.grpc_client() as client, pytest.raises(InferenceServerException) as refused:
            client.load_model("good", config=layout.override(default_model_filename=path))
        answers.append((refused.value.status(), refused.value.message().replace(path, "<path>")))
        status, body = http(server.http_url, "POST", "/v2/repository/models/good/load",
                            load_body(layout.override(default_model_filename=path)))
        answers.append((str(status), json.loads(body)["error"].replace(path, "<path>")))
    assert answers[0] == answers[2] and answers[1] == answers[3], answers
    assert not layout.marker.exists()
    assert_serves(server.grpc_url)


def test_names_outside_the_repository_get_the_unknown_name_answer(server: RuntimeProcess, layout: Layout) -> None:
    """A load of `../outside` (a directory that exists) answers exactly as a load of a name that does not."""
    grpc_answers: dict[str, tuple[str, str]] = {}
    http_answers: dict[str, tuple[int, str]] = {}
    names = ["no_such_model", "../outside", "../../etc/passwd", "..", "good/1", "x\x00y", "n" * 300]
    for name in names:
        with server.grpc_client() as client, pytest.raises(InferenceServerException) as refused:
            client.load_model(name)
        # a long name is echoed cut short (errors.quote_name): compare the answers with the name as quoted
        grpc_answers[name] = (refused.value.status(), refused.value.message().replace(quote_name(name), "'<name>'"))
    assert len(set(grpc_answers.values())) == 1, grpc_answers
    assert grpc_answers["no_such_model"][0] == "StatusCode.INTERNAL"  # Triton's code for an unknown model's load
    assert grpc_answers["no_such_model"][1].startswith("failed to load '<name>'"), grpc_answers
    for quoted, name in (("no_such_model", "no_such_model"), ("..%2Foutside", "../outside"),
                         ("..%2F..%2Fetc%2Fpasswd", "../../etc/passwd"), ("%2E%2E", "..")):
        status, body = http(server.http_url, "POST", f"/v2/repository/models/{quoted}/load", b"{}")
        http_answers[name] = (status, json.loads(body)["error"].replace(quote_name(name), "'<name>'"))
    assert len(set(http_answers.values())) == 1, http_answers
    assert not layout.marker.exists()
    assert_serves(server.grpc_url)


def test_a_model_file_in_a_subdirectory_still_loads(server: RuntimeProcess, layout: Layout) -> None:
    """Relative names inside the version directory keep working (Triton's layout is unchanged)."""
    sub = layout.root / "good" / "1" / "impl"
    sub.mkdir(exist_ok=True)
    (sub / "model.py").write_bytes((layout.root / "good" / "1" / "model.py").read_bytes())
    with server.grpc_client() as client:
        client.load_model("good", config=layout.override(default_model_filename="impl/model.py"))
        assert client.is_model_ready("good")
        client.load_model("good", config=layout.override())
    assert_serves(server.grpc_url)
