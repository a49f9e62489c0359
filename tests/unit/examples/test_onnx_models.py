"""Every example ONNX model is valid, deterministic and computes what its docstring says in onnxruntime.

What the trained ones learnt is measured in test_trained_models.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
import pytest
from ensemble_examples import digit_classifiers, onnx_models, text_model

Arrays = dict[str, npt.NDArray[Any]]


def run(model: onnx.ModelProto, feeds: Arrays) -> Arrays:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def images(count: int, first_seed: int = 100) -> npt.NDArray[np.float32]:
    return np.stack(
        [onnx_models.normalise(onnx_models.synthetic_image((32, 32), s)) for s in range(first_seed, first_seed + count)]
    )


CASES = [
    pytest.param(
        digit_classifiers.classifier_a,
        {"image": images(3)},
        {"logits": ((3, 10), np.float32)},
        id="classifier_a",
    ),
    pytest.param(
        digit_classifiers.classifier_b,
        {"image": images(1)},
        {"logits": ((1, 10), np.float32)},
        id="classifier_b",
    ),
    pytest.param(
        text_model.text_scorer,
        {"token_ids": np.arange(32, dtype=np.int64).reshape(2, 16)},
        {"score": ((2, 1), np.float32)},
        id="text_scorer",
    ),
    pytest.param(
        onnx_models.add_sub,
        {"INPUT0": np.ones((4, 16), np.float32), "INPUT1": np.ones((4, 16), np.float32)},
        {"OUTPUT0": ((4, 16), np.float32), "OUTPUT1": ((4, 16), np.float32)},
        id="add_sub",
    ),
    pytest.param(
        lambda: onnx_models.affine(2.0, 0.0),
        {"X": np.ones((5, 4), np.float32)},
        {"Y": ((5, 4), np.float32)},
        id="affine",
    ),
    pytest.param(
        lambda: onnx_models.versioned(3),
        {"X": np.ones((2, 4), np.float32)},
        {"Y": ((2, 4), np.float32), "version": ((2, 1), np.int32)},
        id="versioned",
    ),
]


@pytest.mark.parametrize(("build", "feeds", "expected"), CASES)
def test_model_runs_with_expected_outputs(build: Any, feeds: Arrays, expected: dict[str, Any]) -> None:
    model = build()
    assert model.ir_version == onnx_models.IR_VERSION
    assert [(o.domain, o.version) for o in model.opset_import] == [("", onnx_models.OPSET)]
    outputs = run(model, feeds)
    assert {name: (value.shape, value.dtype) for name, value in outputs.items()} == {
        name: (shape, np.dtype(dtype)) for name, (shape, dtype) in expected.items()
    }


@pytest.mark.parametrize(("build", "feeds", "expected"), CASES)
def test_model_bytes_are_deterministic(build: Any, feeds: Arrays, expected: object, tmp_path: Path) -> None:
    onnx_models.save(build(), tmp_path / "a.onnx")
    onnx_models.save(build(), tmp_path / "b.onnx")
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.onnx", "b.onnx"]  # no partial files left


def test_add_sub_affine_and_versioned_compute_their_formulas() -> None:
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.full((2, 16), 3.0, dtype=np.float32)
    out = run(onnx_models.add_sub(), {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(out["OUTPUT0"], a + b)
    np.testing.assert_array_equal(out["OUTPUT1"], a - b)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(run(onnx_models.affine(1.0, 100.0), {"X": x})["Y"], x + 100.0)
    versioned = run(onnx_models.versioned(7), {"X": x})
    np.testing.assert_array_equal(versioned["Y"], x + 7.0)
    np.testing.assert_array_equal(versioned["version"], np.full((3, 1), 7, dtype=np.int32))


def test_synthetic_images_are_deterministic_and_differ_by_seed() -> None:
    first = onnx_models.synthetic_image((48, 40), 5)
    assert first.shape == (40, 48, 3) and first.dtype == np.uint8
    np.testing.assert_array_equal(first, onnx_models.synthetic_image((48, 40), 5))
    assert not np.array_equal(first, onnx_models.synthetic_image((48, 40), 6))
