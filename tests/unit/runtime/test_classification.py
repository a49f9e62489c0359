"""The classification extension's pure logic (ensemble_runtime.classification) and label files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ensemble_runtime.classification import apply, class_counts, classify, top_k
from ensemble_runtime.config.labels import MAX_LABEL_FILE_BYTES, read_labels, split_labels
from ensemble_runtime.config.model_config import ConfigError
from ensemble_runtime.errors import ErrorCode, InferenceError
from tritonclient.grpc import model_config_pb2 as mc


def test_top_k_formats_values_as_triton_does() -> None:
    scores = np.array([0.25, 0.5, 0.125, 0.5], np.float32)
    assert top_k(scores, 3, ["a", "b", "", "d"]) == [b"0.500000:1:b", b"0.500000:3:d", b"0.250000:0:a"]
    assert top_k(np.array([3, -7, 9], np.int8), 5, []) == [b"9:2", b"3:0", b"-7:1"]
    assert top_k(np.array([2**63 + 1, 5], np.uint64), 1, []) == [f"{2**63 + 1}:0".encode()]
    assert top_k(np.array([1.0], np.float64), 0, ["x"]) == []
    assert top_k(np.array([1.0, 2.0], np.float32), 2, ["only"]) == [b"2.000000:1", b"1.000000:0:only"]


def test_classify_is_per_batch_entry_when_the_model_batches() -> None:
    batch = np.array([[[1, 5]], [[7, 2]]], np.int32)  # [2, 1, 2]
    out = classify("y", batch, 1, batched=True, labels=("zero", "one"))
    assert out.shape == (2, 1) and out.tolist() == [[b"5:1:one"], [b"7:0:zero"]]
    flat = classify("y", batch, 10, batched=False, labels=())
    assert flat.shape == (4,) and flat.tolist() == [b"7:2", b"5:1", b"2:3", b"1:0"]
    empty = classify("y", np.zeros((0, 3), np.float32), 2, batched=True, labels=())
    assert empty.shape == (0, 2)


@pytest.mark.parametrize(("dtype", "wire"), [(np.object_, "BYTES"), (np.bool_, "BOOL"), (np.float16, "FP16")])
def test_only_numeric_outputs_can_be_classified(dtype: type, wire: str) -> None:
    with pytest.raises(InferenceError, match=f"unsupported type '{wire}'") as refused:
        classify("y", np.zeros(3, dtype), 1, batched=False, labels=())
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT


def test_class_counts_validate_the_parameter() -> None:
    assert class_counts({"a": {"classification": 3}, "b": {}, "c": {"classification": 0}}) == {"a": 3}
    for bad in (-1, True, "3", 1.5):
        with pytest.raises(InferenceError, match="'classification' parameter must be a non-negative integer"):
            class_counts({"a": {"classification": bad}})


def test_apply_replaces_only_the_classified_outputs() -> None:
    outputs = {"x": np.array([1.0, 3.0], np.float32), "y": np.array([4], np.int32)}
    done = apply(outputs, {"x": 1}, batched=False, labels={"x": ("low", "high")})
    assert done["x"].tolist() == [b"3.000000:1:high"] and done["y"] is outputs["y"]


def _config(label: str) -> mc.ModelConfig:
    config = mc.ModelConfig(name="m")
    config.output.add(name="y", label_filename=label)
    config.output.add(name="z")
    return config


def test_labels_are_read_from_the_model_directory(tmp_path: Path) -> None:
    (tmp_path / "labels.txt").write_text("cat\ndog\n\nbird\n", encoding="utf-8")
    assert read_labels(_config("labels.txt"), tmp_path) == {"y": ("cat", "dog", "", "bird")}
    assert split_labels("a\nb") == ("a", "b") and split_labels("") == ()


def test_a_missing_escaping_or_huge_label_file_fails_the_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"output 'y' label_filename 'nope\.txt' cannot be read"):
        read_labels(_config("nope.txt"), tmp_path)
    with pytest.raises(ConfigError, match=r"contains '\.\.'"):
        read_labels(_config("../outside.txt"), tmp_path)
    (tmp_path / "big.txt").write_bytes(b"x" * (MAX_LABEL_FILE_BYTES + 1))
    with pytest.raises(ConfigError, match="is larger than"):
        read_labels(_config("big.txt"), tmp_path)
