"""One `check_*` function per end-to-end scenario: call the ensemble, verify shapes, dtypes and invariants.

Each returns the parsed answer and raises `client.CheckFailed` when it is not what the example models compute
(tritonclient's `InferenceServerException` passes through). `model` names the ensemble to call: the
repository's name by default, the Ensemble resource's name (`seg-pipeline`, ...) when the operator serves it.
`client` is a `tritonclient.grpc.InferenceServerClient`.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import tritonclient.grpc as grpcclient

from ensemble_examples import (
    configs,
    digit_classifiers,
    digits,
    ocr_models,
    ocr_pages,
    onnx_models,
    segmentation_models,
)
from ensemble_examples.client import CheckFailed, _bytes_input, _infer, _input, _text
from ensemble_examples.repository import write_image_png

Labels = list[tuple[str, float]]  # top-k (label, probability), best first
OCR_STRINGS = 50  # held-out words `check_ocr_reading` reads by default
OCR_FLOORS = (0.8, 0.9)  # shares of words read exactly and of digits read right below which it fails


@dataclass(frozen=True, slots=True)
class SegmentationResult:
    labels: list[Labels]  # per image
    mask: npt.NDArray[np.int64]  # [images, 32, 32] class per pixel

    def histogram(self, image: int) -> dict[str, int]:
        """Pixels per segment class of one image (classes with no pixel included, as 0)."""
        counts = np.bincount(self.mask[image].ravel(), minlength=len(segmentation_models.SEGMENT_CLASSES))
        return dict(zip(segmentation_models.SEGMENT_CLASSES, (int(c) for c in counts), strict=True))


@dataclass(frozen=True, slots=True)
class OcrResult:
    boxes: npt.NDArray[np.int32]  # [regions, 4]: left, top, right, bottom (exclusive) in original pixels
    text: list[str]  # one string per region, same order


@dataclass(frozen=True, slots=True)
class OcrReading:
    """What `ocr_pipeline` read on held-out pages, page by page, next to the truth."""

    read: list[list[str]]  # per page, one string per region found
    truth: list[list[str]]  # per page, the words drawn

    @property
    def strings(self) -> tuple[int, int]:
        """(words read exactly, words drawn); a page whose region count is off reads none of its words."""
        right = sum(
            sum(r == t for r, t in zip(read, truth, strict=True))
            for read, truth in zip(self.read, self.truth, strict=True)
            if len(read) == len(truth)
        )
        return right, sum(len(truth) for truth in self.truth)

    @property
    def digits(self) -> tuple[int, int]:
        """(digits read right, digits drawn): per word, its length less the edit distance to what was read."""
        right = sum(
            max(0, len(t) - edit_distance(r, t))
            for read, truth in zip(self.read, self.truth, strict=True)
            if len(read) == len(truth)
            for r, t in zip(read, truth, strict=True)
        )
        return right, sum(len(t) for truth in self.truth for t in truth)


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance: the fewest insertions, deletions and substitutions that turn `a` into `b`."""
    row = list(range(len(b) + 1))
    for i, char in enumerate(a, start=1):
        previous, row[0] = row[0], i
        for j, other in enumerate(b, start=1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (char != other))
    return row[-1]


@dataclass(frozen=True, slots=True)
class DualResult:
    class_id: int
    label: str


@dataclass(frozen=True, slots=True)
class TextResult:
    probability: float
    verdict: bool


def _expect(model: str, name: str, array: npt.NDArray[Any], shape: tuple[int | None, ...], kind: str) -> None:
    """`array` has `shape` (None: any size) and dtype kind `kind` ('O' bytes, 'i' signed int, 'f', 'b')."""
    fits = len(array.shape) == len(shape) and all(w is None or w == g for g, w in zip(array.shape, shape, strict=True))
    if not fits or array.dtype.kind != kind:
        wanted = "[" + ", ".join("*" if d is None else str(d) for d in shape) + "]"
        raise CheckFailed(f"{model}: '{name}' is {array.dtype} {list(array.shape)}, expected kind {kind} {wanted}")


def _parse_labels(model: str, row: npt.NDArray[Any]) -> Labels:
    parsed: Labels = []
    for value in row:
        entry = _text(value)
        label, _, score = entry.rpartition(":")
        try:
            probability = float(score)
        except ValueError:
            probability = -1.0
        if label not in configs.LABELS or not 0.0 <= probability <= 1.0:
            raise CheckFailed(f"{model}: unexpected label entry '{entry}'")
        parsed.append((label, probability))
    if [p for _, p in parsed] != sorted((p for _, p in parsed), reverse=True):
        raise CheckFailed(f"{model}: labels are not sorted by probability: {parsed}")
    return parsed


def _digit_pictures(count: int) -> list[bytes]:
    """The first `count` held-out handwritten digits, drawn as the PNGs a client sends."""
    return [digit_classifiers.drawn(ink) for ink in digits.split().held_out.take(count).ink]


def check_image_pipeline(
    client: Any, images: Sequence[bytes] | None = None, model: str = "image_pipeline"
) -> list[Labels]:
    """PNG -> image_preprocess -> classifier_a -> image_postprocess: top-k labels per image."""
    images = list(images) if images is not None else _digit_pictures(2)
    labels = _infer(client, model, [_bytes_input("image_bytes", images)], ["labels"])["labels"]
    _expect(model, "labels", labels, (len(images), configs.TOP_K), "O")
    return [_parse_labels(model, row) for row in labels]


def check_dual_classifier(
    client: Any, images: Sequence[bytes] | None = None, model: str = "dual_classifier"
) -> list[DualResult]:
    """PNG -> image_preprocess -> classifier_a + classifier_b -> combine_argmax: one class per image."""
    images = list(images) if images is not None else _digit_pictures(3)
    out = _infer(client, model, [_bytes_input("image_bytes", images)], ["class_id", "label"])
    _expect(model, "class_id", out["class_id"], (len(images), 1), "i")
    _expect(model, "label", out["label"], (len(images), 1), "O")
    results = [
        DualResult(int(class_id), _text(label))
        for class_id, label in zip(out["class_id"][:, 0], out["label"][:, 0], strict=True)
    ]
    for result in results:
        if not 0 <= result.class_id < len(configs.LABELS) or configs.LABELS[result.class_id] != result.label:
            raise CheckFailed(f"{model}: class {result.class_id} came back labelled '{result.label}'")
    return results


def check_text_pipeline(
    client: Any, sentences: Sequence[str], threshold: float = 0.5, model: str = "text_pipeline"
) -> list[TextResult]:
    """text -> tokenizer (4 CPU instances) -> text_scorer -> threshold: probability and verdict per text."""
    thresholds = np.full((len(sentences), 1), threshold, dtype=np.float32)
    inputs = [_bytes_input("text", [s.encode() for s in sentences]), _input("threshold", thresholds, "FP32")]
    out = _infer(client, model, inputs, ["probability", "verdict"])
    _expect(model, "probability", out["probability"], (len(sentences), 1), "f")
    _expect(model, "verdict", out["verdict"], (len(sentences), 1), "b")
    results = [
        TextResult(float(p), bool(v)) for p, v in zip(out["probability"][:, 0], out["verdict"][:, 0], strict=True)
    ]
    for sentence, result in zip(sentences, results, strict=True):
        if not 0.0 <= result.probability <= 1.0 or result.verdict != (result.probability >= threshold):
            raise CheckFailed(
                f"{model}: probability {result.probability} with verdict {result.verdict} for {sentence!r}"
            )
    return results


def check_seg_pipeline(
    client: Any, images: Sequence[bytes] | None = None, model: str = "seg_pipeline"
) -> SegmentationResult:
    """PNG -> image_preprocess -> (classifier_a -> image_postprocess) + segmenter: labels and a class mask."""
    images = list(images) if images is not None else [segmentation_models.demo_image(), write_image_png(seed=1)]
    out = _infer(client, model, [_bytes_input("image_bytes", images)], ["labels", "mask"])
    _expect(model, "labels", out["labels"], (len(images), configs.TOP_K), "O")
    size = onnx_models.IMAGE_SIZE
    _expect(model, "mask", out["mask"], (len(images), size, size), "i")
    mask: npt.NDArray[np.int64] = out["mask"].astype(np.int64)
    if mask.size and not 0 <= int(mask.min()) <= int(mask.max()) < len(segmentation_models.SEGMENT_CLASSES):
        raise CheckFailed(f"{model}: mask classes {int(mask.min())}..{int(mask.max())} out of range")
    return SegmentationResult([_parse_labels(model, row) for row in out["labels"]], mask)


def check_ocr_pipeline(client: Any, image: bytes | None = None, model: str = "ocr_pipeline") -> OcrResult:
    """One image -> ocr_preprocess -> text_detector -> crop_boxes -> text_recognizer -> ctc_decode.

    Not batching: the request's `image_bytes` is [1]. Every box lies inside the image, one string per box.
    The default image is the demo page (`ocr_pages.held_out_pages`' first).
    """
    data = image if image is not None else ocr_pages.held_out_pages(ocr_pages.MAX_WORDS)[0].png()
    array = np.empty(1, dtype=np.object_)
    array[0] = data
    tensor = grpcclient.InferInput("image_bytes", [1], "BYTES")
    tensor.set_data_from_numpy(array)
    out = _infer(client, model, [tensor], ["text", "boxes"])
    _expect(model, "boxes", out["boxes"], (None, 4), "i")
    regions = out["boxes"].shape[0]
    _expect(model, "text", out["text"], (regions,), "O")
    boxes: npt.NDArray[np.int32] = out["boxes"].astype(np.int32)
    from PIL import Image  # Pillow: only to read the image's size

    with Image.open(io.BytesIO(data)) as opened:
        width, height = opened.size
    for left, top, right, bottom in boxes.tolist():
        if not (0 <= left < right <= width and 0 <= top < bottom <= height):
            raise CheckFailed(f"{model}: box {[left, top, right, bottom]} is not inside the {width}x{height} image")
    text = [_text(value) for value in out["text"]]
    if any(set(t) - set(ocr_models.ALPHABET[1:]) for t in text):
        raise CheckFailed(f"{model}: strings {text} use characters outside the alphabet")
    return OcrResult(boxes, text)


def check_ocr_reading(
    client: Any,
    strings: int = OCR_STRINGS,
    model: str = "ocr_pipeline",
    floors: tuple[float, float] = OCR_FLOORS,
    source: digits.Digits | None = None,
) -> OcrReading:
    """Held-out pages holding `strings` words -> `ocr_pipeline`, one page per request; fails when the share of
    words read exactly or of digits read right is below `floors` (strings, digits). `source`: the held-out
    digits when they come from a file."""
    pages = ocr_pages.held_out_pages(strings, source=source)
    reading = OcrReading([check_ocr_pipeline(client, page.png(), model).text for page in pages], [p.truth for p in pages])
    for (right, total), floor, what in zip((reading.strings, reading.digits), floors, ("strings", "digits"), strict=True):
        if right < floor * total:
            raise CheckFailed(f"{model}: read {right}/{total} held-out {what} right, below the floor {floor:.0%}")
    return reading
