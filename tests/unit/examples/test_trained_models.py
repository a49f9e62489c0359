"""The trained example models, run in onnxruntime: what they achieve on data they never saw, and that training
gives the same bytes every time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
import pytest
from ensemble_examples import client, digit_classifiers, digits, held_out, text_corpus, text_model
from ensemble_examples.repository import write_new_version

CLASSIFIER_FLOOR = 0.93  # each classifier alone, on the 450 held-out digits (measured: a 0.973, b 0.969)
ENSEMBLE_FLOOR = 0.95  # the sum of their log-probabilities (measured: 0.973)
TEXT_FLOOR = 0.85  # held-out sentences (measured: 1.0 on 28)


def logits(model: onnx.ModelProto, images: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    result: npt.NDArray[np.float32] = session.run(["logits"], {"image": images})[0]
    return result


@pytest.fixture(scope="module")
def held_out_logits() -> dict[str, Any]:
    """Both classifiers' logits for every held-out digit, drawn and preprocessed as the server does."""
    held_out = digits.split().held_out
    images = np.stack([digit_classifiers.preprocess(digit_classifiers.drawn(ink)) for ink in held_out.ink])
    return {
        "labels": held_out.labels,
        "a": logits(digit_classifiers.classifier_a(), images),
        "b": logits(digit_classifiers.classifier_b(), images),
    }


def accuracy(scores: npt.NDArray[np.float32], labels: npt.NDArray[np.int64]) -> float:
    return float(np.mean(scores.argmax(axis=1) == labels))


def test_each_classifier_reads_held_out_digits(held_out_logits: dict[str, Any]) -> None:
    labels = held_out_logits["labels"]
    assert len(labels) == 450
    assert accuracy(held_out_logits["a"], labels) >= CLASSIFIER_FLOOR
    assert accuracy(held_out_logits["b"], labels) >= CLASSIFIER_FLOOR


def test_the_ensemble_of_both_reads_held_out_digits(held_out_logits: dict[str, Any]) -> None:
    summed = held_out_logits["a"] + held_out_logits["b"]
    assert accuracy(summed, held_out_logits["labels"]) >= ENSEMBLE_FLOOR


def test_logits_are_log_probabilities_of_two_different_models(held_out_logits: dict[str, Any]) -> None:
    for name in ("a", "b"):
        np.testing.assert_allclose(np.exp(held_out_logits[name]).sum(axis=1), 1.0, rtol=1e-5)
    assert not np.allclose(held_out_logits["a"], held_out_logits["b"], atol=1e-2)
    ops = {
        name: [node.op_type for node in build().graph.node]
        for name, build in (("a", digit_classifiers.classifier_a), ("b", digit_classifiers.classifier_b))
    }
    assert ops["a"][-4:] == ["Gemm", "Relu", "Gemm", "LogSoftmax"]
    assert ops["b"][-3:] == ["Flatten", "Gemm", "LogSoftmax"]


def test_training_again_gives_the_same_bytes() -> None:
    again = digit_classifiers.trained.__wrapped__()
    assert digit_classifiers.classifier_a(again).SerializeToString(deterministic=True) == (
        digit_classifiers.classifier_a().SerializeToString(deterministic=True)
    )
    assert digit_classifiers.classifier_b(again).SerializeToString(deterministic=True) == (
        digit_classifiers.classifier_b().SerializeToString(deterministic=True)
    )
    text_again = text_model.trained.__wrapped__()
    assert text_model.text_scorer(text_again).SerializeToString(deterministic=True) == (
        text_model.text_scorer().SerializeToString(deterministic=True)
    )


def scores(texts: list[str]) -> npt.NDArray[np.float32]:
    session = ort.InferenceSession(text_model.text_scorer().SerializeToString(), providers=["CPUExecutionProvider"])
    ids = np.array([text_model.token_ids(text) for text in texts], dtype=np.int64)
    result: npt.NDArray[np.float32] = session.run(["score"], {"token_ids": ids})[0][:, 0]
    return result


def test_text_scorer_judges_held_out_sentences() -> None:
    texts = [review.text for review in text_corpus.HELD_OUT]
    truth = np.array([review.positive for review in text_corpus.HELD_OUT])
    assert float(np.mean((scores(texts) >= 0.5) == truth)) >= TEXT_FLOOR


def test_the_demo_sentences_are_held_out_and_judged_right() -> None:
    trained_on = {review.text for review in text_corpus.TRAIN}
    held_out = {review.text: review.positive for review in text_corpus.HELD_OUT}
    assert not trained_on & set(client.SENTENCES)
    assert set(client.SENTENCES) <= set(held_out)
    verdicts = scores(list(client.SENTENCES)) >= 0.5
    assert verdicts.tolist() == [held_out[sentence] for sentence in client.SENTENCES]


def test_the_corpus_is_balanced_short_and_without_repeats() -> None:
    everything = [*text_corpus.TRAIN, *text_corpus.HELD_OUT]
    assert len(everything) >= 120
    assert len({review.text for review in everything}) == len(everything)
    for part in (text_corpus.TRAIN, text_corpus.HELD_OUT):
        positives = sum(review.positive for review in part)
        assert positives * 2 == len(part)
    assert all(text_model.token_ids(review.text)[-1] == text_model.PAD for review in everything)  # < 16 words
    assert any(" not " in f" {review.text} " for review in text_corpus.TRAIN)


def test_a_score_under_its_floor_fails_the_check_by_name() -> None:
    good = held_out.score("classifier_a alone", [1, 2, 3, 4], [1, 2, 3, 4])
    bad = held_out.score("classifier_b alone", [1, 0, 0, 4], [1, 2, 3, 4])
    assert (good.right, good.total, bad.accuracy) == (4, 4, 0.5)
    held_out.require([good], 0.9, "dual_classifier")
    with pytest.raises(client.CheckFailed, match=r"dual_classifier: .* 90% floor .*: classifier_b alone 50\.0%$"):
        held_out.require([good, bad], 0.9, "dual_classifier")


def test_held_out_sentences_put_the_demo_sentences_first() -> None:
    reviews = held_out.held_out_sentences(first=client.SENTENCES)
    assert [r.text for r in reviews[: len(client.SENTENCES)]] == list(client.SENTENCES)
    assert sorted(r.text for r in reviews) == sorted(r.text for r in text_corpus.HELD_OUT)
    with pytest.raises(ValueError, match="not held-out"):
        held_out.held_out_sentences(first=[text_corpus.TRAIN[0].text])


def test_classifier_b_next_version_is_another_model_that_reads_as_well(
    held_out_logits: dict[str, Any], tmp_path: Path
) -> None:
    """The version the demo rolls in: written beside version 1 as a pipeline would, different weights, and
    at least as good on held-out digits as the floor asks of any classifier."""
    about = write_new_version(tmp_path, "classifier_b", 2)
    assert "cross-validation" in about
    model = onnx.load(tmp_path / "classifier_b" / "2" / "model.onnx")
    held_out = digits.split().held_out
    images = np.stack([digit_classifiers.preprocess(digit_classifiers.drawn(ink)) for ink in held_out.ink])
    retrained = logits(model, images)
    assert accuracy(retrained, held_out_logits["labels"]) >= CLASSIFIER_FLOOR
    assert not np.allclose(retrained, held_out_logits["b"])  # really another version
    with pytest.raises(ValueError, match="no version 1"):
        write_new_version(tmp_path, "classifier_b", 1)
    with pytest.raises(ValueError, match="classifier_a"):
        write_new_version(tmp_path, "classifier_a", 2)
