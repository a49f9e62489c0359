"""The Python models, run by the runtime's Triton-compatible Python backend (`triton_python_backend_utils`)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest
from ensemble_examples import configs, digit_classifiers, digits, onnx_models, text_corpus, text_model
from ensemble_examples.repository import encode_image, write_image_png
from ensemble_runtime.backends.base import LoadContext, ModelCaller, ModelInstance
from ensemble_runtime.backends.python import PythonBackend
from ensemble_runtime.config.model_config import apply_defaults, read_config
from ensemble_runtime.errors import not_found
from ensemble_runtime.inference import BackendRequest, InferRequest, InferResponse
from PIL import Image

Arrays = dict[str, npt.NDArray[Any]]
Run = Callable[..., Arrays | BaseException]


def objects(values: list[bytes], shape: tuple[int, ...]) -> npt.NDArray[np.object_]:
    array = np.empty(len(values), dtype=np.object_)
    array[:] = values
    return array.reshape(shape)


def onnx_caller(repo: Path) -> ModelCaller:
    """BLS calls answered by the ONNX models of the repository, run directly in onnxruntime."""

    async def call(request: InferRequest) -> InferResponse:
        path = repo / request.model_name / "1" / "model.onnx"
        if not path.is_file():
            raise not_found(f"no model '{request.model_name}'")
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = request.requested_outputs or [o.name for o in session.get_outputs()]
        outputs = dict(zip(names, session.run(names, dict(request.inputs)), strict=True))
        return InferResponse(request.model_name, "1", outputs, request.id)

    return call


async def load(repo: Path, name: str) -> list[ModelInstance]:
    config = read_config(repo / name)
    assert config is not None
    backend = PythonBackend()
    version_path = repo / name / "1"
    context = LoadContext(
        config=backend.prepare_config(apply_defaults(config, name), version_path),
        version=1,
        version_path=version_path,
        model_path=repo / name,
        caller=onnx_caller(repo),
    )
    return await backend.load(context)


async def _load_and_execute(repo: Path, name: str, requests: list[BackendRequest]) -> list[Any]:
    instances = await load(repo, name)
    try:
        return [(await instance.execute(requests)) for instance in instances]
    finally:
        for instance in instances:
            await instance.close()


@pytest.fixture
def run(example_repo: Path) -> Run:
    """`run(model, inputs)` -> outputs (or the exception): loads the model, executes once, closes it."""

    def _run(name: str, inputs: Mapping[str, npt.NDArray[Any]], outputs: tuple[str, ...] = ()) -> Any:
        per_instance = asyncio.run(_load_and_execute(example_repo, name, [BackendRequest(dict(inputs), outputs)]))
        return per_instance[0][0]

    return _run


def test_image_preprocess_decodes_png_and_jpeg_to_normalised_chw(run: Run) -> None:
    images = [write_image_png(seed=1), encode_image((64, 20), seed=2, image_format="JPEG")]
    out = run("image_preprocess", {"image_bytes": objects(images, (2, 1))})
    assert isinstance(out, dict)
    pixels = out["image"]
    assert pixels.shape == (2, 3, 32, 32) and pixels.dtype == np.float32
    assert -3.0 < float(pixels.min()) < float(pixels.max()) < 3.0
    with Image.open(io.BytesIO(images[0])) as image:
        rgb = np.asarray(image.convert("RGB").resize((32, 32), Image.Resampling.BILINEAR), dtype=np.float32)
    np.testing.assert_allclose(pixels[0, 0] * 0.2470 + 0.4914, rgb[:, :, 0] / 255.0, atol=1e-5)


def test_image_preprocess_computes_what_the_classifiers_were_trained_on(run: Run) -> None:
    held_out = digits.split().held_out.take(4)
    pictures = [digit_classifiers.drawn(ink) for ink in held_out.ink]
    out = run("image_preprocess", {"image_bytes": objects(pictures, (4, 1))})
    assert isinstance(out, dict)
    expected = np.stack([digit_classifiers.preprocess(picture) for picture in pictures])
    np.testing.assert_array_equal(out["image"], expected)  # bit for bit: training and serving agree


def test_image_preprocess_reports_undecodable_bytes(run: Run) -> None:
    out = run("image_preprocess", {"image_bytes": objects([b"not an image"], (1, 1))})
    assert isinstance(out, BaseException)
    assert "cannot decode image" in str(out)


def test_image_postprocess_returns_top_k_label_strings(run: Run) -> None:
    logits = np.zeros((2, 10), dtype=np.float32)
    logits[0, [3, 7, 1]] = [5.0, 4.0, 3.0]
    logits[1, 9] = 1.0
    out = run("image_postprocess", {"logits": logits})
    assert isinstance(out, dict)
    labels = [[v.decode() for v in row] for row in out["labels"]]
    assert out["labels"].shape == (2, configs.TOP_K)
    assert [entry.split(":")[0] for entry in labels[0]] == ["3", "7", "1"]
    assert labels[1][0].startswith("9:")
    scores = [float(entry.split(":")[1]) for entry in labels[0]]
    assert scores == sorted(scores, reverse=True) and sum(scores) <= 1.0


def test_combine_argmax_adds_the_logits(run: Run) -> None:
    a = np.zeros((2, 10), dtype=np.float32)
    b = np.zeros((2, 10), dtype=np.float32)
    a[0, 2], b[0, 5] = 3.0, 2.0  # 2 alone wins
    a[1, 4], b[1, 6], a[1, 6] = 2.0, 1.5, 1.0  # 6 wins only on the sum
    out = run("combine_argmax", {"logits_a": a, "logits_b": b})
    assert isinstance(out, dict)
    assert out["class_id"].tolist() == [[2], [6]] and out["class_id"].dtype == np.int64
    assert out["label"].tolist() == [[b"2"], [b"6"]]


def test_tokenizer_hashes_pads_and_truncates(run: Run) -> None:
    long_text = " ".join(f"w{i}" for i in range(30)).encode()
    texts = objects([b"Hello, world!", b"hello WORLD", long_text, b""], (4, 1))
    out = run("tokenizer", {"text": texts})
    assert isinstance(out, dict)
    ids = out["token_ids"]
    assert ids.shape == (4, 16) and ids.dtype == np.int64
    assert ids[0].tolist() == ids[1].tolist()
    assert all(0 < i < onnx_models.VOCABULARY_SIZE for i in ids[0, :2]) and ids[0, 2:].tolist() == [0] * 14
    assert np.all(ids[2] > 0)
    assert ids[3].tolist() == [0] * 16


def test_tokenizer_gives_the_ids_the_text_scorer_was_trained_on(run: Run) -> None:
    texts = [review.text for review in text_corpus.HELD_OUT[:6]] + ["Not GOOD -- don't go!", ""]
    out = run("tokenizer", {"text": objects([t.encode() for t in texts], (len(texts), 1))})
    assert isinstance(out, dict)
    assert out["token_ids"].tolist() == [text_model.token_ids(text) for text in texts]


def test_tokenizer_runs_as_four_instances(example_repo: Path) -> None:
    request = BackendRequest({"text": objects([b"same text"], (1, 1))}, ())
    per_instance = asyncio.run(_load_and_execute(example_repo, "tokenizer", [request]))
    assert len(per_instance) == configs.TOKENIZER_INSTANCES
    results = [results[0] for results in per_instance]
    assert all(isinstance(r, dict) for r in results)
    assert len({tuple(r["token_ids"].ravel()) for r in results}) == 1


def test_threshold_gives_probability_and_verdict(run: Run) -> None:
    score = np.array([[0.2], [0.5], [0.9]], dtype=np.float32)
    threshold = np.full((3, 1), 0.5, dtype=np.float32)
    out = run("threshold", {"score": score, "threshold": threshold})
    assert isinstance(out, dict)
    np.testing.assert_array_equal(out["probability"], score)
    assert out["verdict"].dtype == np.bool_
    assert out["verdict"].tolist() == [[False], [True], [True]]


def test_bls_router_calls_the_routed_model(run: Run) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    for route, model, expected in ((0, "model_a", x * 2.0), (1, "model_b", x + 100.0)):
        out = run("bls_router", {"route": np.array([route], dtype=np.int32), "X": x})
        assert isinstance(out, dict)
        np.testing.assert_array_equal(out["Y"], expected)
        assert out["model"].tolist() == [model.encode()]


def test_bls_router_refuses_an_unknown_route(run: Run) -> None:
    out = run("bls_router", {"route": np.array([7], dtype=np.int32), "X": np.zeros((1, 4), np.float32)})
    assert isinstance(out, BaseException)
    assert "route 7" in str(out)
