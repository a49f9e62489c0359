"""The generated repository: Triton layout, configs that parse and agree with their models and steps."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from ensemble_examples import configs
from ensemble_examples.__main__ import main
from ensemble_examples.repository import (
    build_repository,
    model_names,
    python_model_source,
    write_image_png,
    write_versioned_version,
)
from ensemble_runtime.config.model_config import apply_defaults, check_config
from ensemble_runtime.config.onnx_autocomplete import read_graph_io
from ensemble_runtime.ensemble.graph import build_graph
from google.protobuf import text_format
from PIL import Image
from tritonclient.grpc import model_config_pb2 as mc

ENSEMBLES = ("dual_classifier", "image_pipeline", "text_pipeline")
PYTHON_MODELS = (
    "bls_router",
    "combine_argmax",
    "image_postprocess",
    "image_preprocess",
    "threshold",
    "tokenizer",
)
ONNX_MODELS = ("add_sub", "classifier_a", "classifier_b", "model_a", "model_b", "text_scorer", "versioned")
# The segmentation and OCR scenarios, not batching in part: test_new_pipelines.py checks them further.
NEW_ENSEMBLES = ("ocr_pipeline", "seg_pipeline")
NEW_PYTHON_MODELS = ("crop_boxes", "ctc_decode", "ocr_preprocess")
NEW_ONNX_MODELS = ("segmenter", "text_detector", "text_recognizer")


def parse(root: Path, name: str) -> mc.ModelConfig:
    config = mc.ModelConfig()
    text_format.Parse((root / name / "config.pbtxt").read_text(encoding="utf-8"), config)
    return config


def all_configs(root: Path) -> dict[str, mc.ModelConfig]:
    return {name: parse(root, name) for name in model_names()}


def test_build_writes_every_model_in_triton_layout(example_repo: Path) -> None:
    assert model_names() == sorted(
        (*ENSEMBLES, *PYTHON_MODELS, *ONNX_MODELS, *NEW_ENSEMBLES, *NEW_PYTHON_MODELS, *NEW_ONNX_MODELS)
    )
    assert sorted(p.name for p in example_repo.iterdir()) == model_names()
    for name in ONNX_MODELS:
        assert sorted(p.name for p in (example_repo / name).iterdir()) == ["1", "config.pbtxt"]
        assert [p.name for p in (example_repo / name / "1").iterdir()] == ["model.onnx"]
    for name in PYTHON_MODELS:
        assert [p.name for p in (example_repo / name / "1").iterdir()] == ["model.py"]
        assert (example_repo / name / "1" / "model.py").read_text(encoding="utf-8") == python_model_source(name)
    for name in ENSEMBLES:
        assert list((example_repo / name / "1").iterdir()) == []


def test_every_config_parses_and_passes_the_runtime_checks(example_repo: Path) -> None:
    for name, config in all_configs(example_repo).items():
        assert config.name == name
        check_config(apply_defaults(config, name), name)
        ensembles, onnx_models = (*ENSEMBLES, *NEW_ENSEMBLES), (*ONNX_MODELS, *NEW_ONNX_MODELS)
        expected = "ensemble" if name in ensembles else "onnxruntime_onnx" if name in onnx_models else ""
        assert config.platform == expected
        assert config.backend == ("python" if name in (*PYTHON_MODELS, *NEW_PYTHON_MODELS) else "")


def test_onnx_configs_match_their_graphs(example_repo: Path) -> None:
    for name in ONNX_MODELS:
        config = parse(example_repo, name)
        inputs, outputs = read_graph_io(example_repo / name / "1" / "model.onnx")
        for declared, graph in ((config.input, inputs), (config.output, outputs)):
            assert [(t.name, t.data_type, [-1, *t.dims]) for t in declared] == graph, name


def test_every_ensemble_validates_against_its_steps(example_repo: Path) -> None:
    loaded = all_configs(example_repo)
    versions = {name: [1] for name in loaded}
    for name in ENSEMBLES:
        config = loaded[name]
        graph = build_graph(config, loaded, versions)
        steps = graph.step_models()
        assert config.max_batch_size == configs.MAX_BATCH_SIZE
        assert all(loaded[step].max_batch_size >= config.max_batch_size for step in steps), name


def test_step_tensors_agree_in_type(example_repo: Path) -> None:
    """An independent check of what build_graph enforces: each ensemble tensor has one data type."""
    loaded = all_configs(example_repo)
    for name in ENSEMBLES:
        ensemble = loaded[name]
        types = {t.name: t.data_type for t in ensemble.input}
        for step in ensemble.ensemble_scheduling.step:
            model = loaded[step.model_name]
            for output in model.output:
                types[step.output_map[output.name]] = output.data_type
        for step in ensemble.ensemble_scheduling.step:
            model = loaded[step.model_name]
            for tensor in model.input:
                assert types[step.input_map[tensor.name]] == tensor.data_type, (
                    name,
                    step.model_name,
                    tensor.name,
                )
        for tensor in ensemble.output:
            assert types[tensor.name] == tensor.data_type, (name, tensor.name)


def test_scheduling_settings(example_repo: Path) -> None:
    loaded = all_configs(example_repo)
    for name in ("classifier_a", "classifier_b"):
        assert loaded[name].dynamic_batching.max_queue_delay_microseconds == 500
        assert loaded[name].max_batch_size == 8
    (group,) = loaded["tokenizer"].instance_group
    assert (group.count, group.kind) == (4, mc.ModelInstanceGroup.KIND_CPU)
    assert loaded["bls_router"].max_batch_size == 0
    assert loaded["image_postprocess"].parameters["labels"].string_value.split(",") == list(configs.LABELS)


def test_only_writes_the_models_asked_for_and_their_dependencies(tmp_path: Path) -> None:
    written = build_repository(tmp_path, only=["text_pipeline", "bls_router"])
    assert written == [
        "bls_router",
        "model_a",
        "model_b",
        "text_pipeline",
        "text_scorer",
        "threshold",
        "tokenizer",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == written
    with pytest.raises(KeyError, match="no_such_model"):
        build_repository(tmp_path, only=["no_such_model"])


def test_rebuilding_gives_the_same_bytes_and_keeps_other_files(tmp_path: Path) -> None:
    build_repository(tmp_path)
    snapshot = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    (tmp_path / "mine").mkdir()
    build_repository(tmp_path)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == snapshot
    assert (tmp_path / "mine").is_dir()


def test_write_versioned_version_adds_a_version(tmp_path: Path) -> None:
    build_repository(tmp_path, only=["versioned"])
    path = write_versioned_version(tmp_path, 2)
    assert path == tmp_path / "versioned" / "2" / "model.onnx"
    assert sorted(p.name for p in (tmp_path / "versioned").iterdir()) == ["1", "2", "config.pbtxt"]
    with pytest.raises(ValueError, match="positive"):
        write_versioned_version(tmp_path, 0)


def test_write_image_png_is_a_deterministic_png() -> None:
    data = write_image_png(size=(48, 40), seed=3)
    assert data == write_image_png(size=(48, 40), seed=3) != write_image_png(size=(48, 40), seed=4)
    with Image.open(io.BytesIO(data)) as image:
        assert (image.format, image.size, image.mode) == ("PNG", (48, 40), "RGB")


def test_main_builds_the_repository(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "repo"), "--only", "add_sub"]) == 0
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == ["add_sub"]
    assert "wrote 1 models" in capsys.readouterr().out
