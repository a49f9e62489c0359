"""The served models measured on data they never saw: the held-out handwritten digits (`digits.split()`) and
the held-out sentences (`text_corpus.HELD_OUT`), sent over gRPC in requests of `configs.MAX_BATCH_SIZE`.

`client` is a `tritonclient.grpc.InferenceServerClient`; a wrong shape or type raises `client.CheckFailed`,
and so does an accuracy under its floor (`require`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from ensemble_examples import configs, digit_classifiers, digits, text_corpus
from ensemble_examples.checks import (
    Labels,
    TextResult,
    _expect,
    check_dual_classifier,
    check_image_pipeline,
    check_text_pipeline,
)
from ensemble_examples.client import CheckFailed, _bytes_input, _infer, _input

DIGIT_FLOOR = 0.90  # each classifier alone and the ensemble, on the 450 held-out digits
TEXT_FLOOR = 0.80  # the text pipeline's verdicts on the held-out sentences

T = TypeVar("T")
Digits = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Score:
    name: str
    right: int
    total: int

    @property
    def accuracy(self) -> float:
        return self.right / self.total if self.total else 0.0

    def line(self) -> str:
        return f"{self.name:<30} {self.right:>3}/{self.total} right  {100 * self.accuracy:5.1f}%"


def score(name: str, predicted: Sequence[Any], truth: Sequence[Any]) -> Score:
    right = sum(1 for p, t in zip(predicted, truth, strict=True) if p == t)
    return Score(name, right, len(truth))


def require(scores: Sequence[Score], floor: float, model: str) -> None:
    """Raise CheckFailed naming every score under `floor`."""
    low = [s for s in scores if s.accuracy < floor]
    if low:
        found = ", ".join(f"{s.name} {100 * s.accuracy:.1f}%" for s in low)
        raise CheckFailed(f"{model}: accuracy under the {100 * floor:.0f}% floor on held-out data: {found}")


def held_out_digits(count: int | None = None, source: digits.Digits | None = None) -> tuple[list[bytes], Digits]:
    """The held-out digits (all 450, or the first `count`) as the PNGs a client sends, and their labels.
    `source`: the held-out digits when they come from a file (`digits.load`), not from scikit-learn."""
    held_out = source if source is not None else digits.split().held_out
    if count is not None:
        held_out = held_out.take(count)
    return [digit_classifiers.drawn(ink) for ink in held_out.ink], held_out.labels


def _batches(items: Sequence[T], size: int = configs.MAX_BATCH_SIZE) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _each_batch(items: Sequence[T], call: Callable[[Sequence[T]], list[Any]]) -> list[Any]:
    return [result for batch in _batches(items) for result in call(batch)]


def top_labels(client: Any, pictures: Sequence[bytes], model: str = "image_pipeline") -> list[Labels]:
    """The image pipeline's top-k (label, probability) for each picture."""
    return _each_batch(pictures, lambda batch: check_image_pipeline(client, batch, model=model))


def ensemble_digits(client: Any, pictures: Sequence[bytes], model: str = "dual_classifier") -> list[int]:
    """The two-classifier ensemble's digit for each picture."""
    results = _each_batch(pictures, lambda batch: check_dual_classifier(client, batch, model=model))
    return [result.class_id for result in results]


def classifier_digits(
    client: Any, pictures: Sequence[bytes], classifier: str, preprocess: str = "image_preprocess"
) -> list[int]:
    """One served classifier alone: each batch through `preprocess`, then through `classifier`."""

    def read(batch: Sequence[bytes]) -> list[int]:
        image = _infer(client, preprocess, [_bytes_input("image_bytes", batch)], ["image"])["image"]
        logits = _infer(client, classifier, [_input("image", image, "FP32")], ["logits"])["logits"]
        _expect(classifier, "logits", logits, (len(batch), len(configs.LABELS)), "f")
        return [int(digit) for digit in logits.argmax(axis=1)]

    return _each_batch(pictures, read)


def sentence_verdicts(client: Any, sentences: Sequence[str], model: str = "text_pipeline") -> list[TextResult]:
    """The text pipeline's probability and verdict (threshold 0.5) for each sentence."""
    return _each_batch(sentences, lambda batch: check_text_pipeline(client, list(batch), model=model))


def held_out_sentences(first: Sequence[str] = ()) -> list[text_corpus.Review]:
    """The held-out reviews, those whose text is in `first` first (in that order), then the rest."""
    by_text = {review.text: review for review in text_corpus.HELD_OUT}
    missing = [text for text in first if text not in by_text]
    if missing:
        raise ValueError(f"not held-out sentences: {missing}")
    return [by_text[text] for text in first] + [r for r in text_corpus.HELD_OUT if r.text not in set(first)]
