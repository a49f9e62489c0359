"""The OCR recognizer's training: its numpy copy of the served pipeline's first three steps against the real
models, its step labels against greedy CTC decoding, the exported ONNX against the classifier, and the pages
it learns from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ensemble_examples import checks, digits, ocr_models, ocr_pages, ocr_training

from tests.unit.examples.test_new_pipelines import PAGE_SHAPE, one_bytes, onnx_run, run_python

TRAINING_PAGES = [ocr_pages.draw_page(digits.split().train, ocr_training.TRAINING_SEED + seed) for seed in range(3)]


def greedy(best: list[int]) -> str:
    chars, previous = [], 0
    for index in best:
        if index not in (previous, 0):
            chars.append(ocr_models.ALPHABET[index])
        previous = index
    return "".join(chars)


@pytest.mark.parametrize("page", TRAINING_PAGES, ids=["page0", "page1", "page2"])
def test_numpy_steps_cut_the_pages_as_the_served_models_do(example_repo: Path, page: ocr_pages.Page) -> None:
    pre = run_python(example_repo, "ocr_preprocess", {"image_bytes": one_bytes(page.png())})
    image = ocr_training.page_image(page.pixels)
    np.testing.assert_array_equal(pre["image"], image.reshape(PAGE_SHAPE))
    served_heat = onnx_run(ocr_models.text_detector(), {"image": pre["image"]})["heatmap"]
    heat = ocr_training.heat(image)
    np.testing.assert_allclose(served_heat[0, 0], heat, atol=1e-5)
    inputs = {"heatmap": served_heat, "image": pre["image"], "image_size": pre["image_size"]}
    served = run_python(example_repo, "crop_boxes", inputs)
    cut = ocr_training.word_crops(page)
    assert len(cut) == len(page.words) == served["boxes"].shape[0] == 4
    for (_, (top, left, bottom, right), crop, _), box, served_crop in zip(
        cut, served["boxes"].tolist(), served["crops"][:, 0], strict=True
    ):
        assert box == [left, top, right + 1, bottom + 1]  # the page is not resized: boxes in page pixels
        np.testing.assert_array_equal(crop, served_crop)


def test_step_labels_decode_to_the_words_repeated_digits_included() -> None:
    train = digits.split().train
    words = [
        cut
        for seed in range(40)
        for cut in ocr_training.word_crops(ocr_pages.draw_page(train, ocr_training.TRAINING_SEED + seed))
    ]
    repeats = [word for word, *_ in words if any(a == b for a, b in zip(word.text, word.text[1:], strict=False))]
    assert len(repeats) >= 10
    for word, box, _, scaled in words:
        labels = ocr_training.step_labels(word, box, scaled)
        assert greedy(labels.tolist()) == word.text
        assert labels[scaled // ocr_models.STEP + 1 :].max(initial=0) == 0  # paper past the word: blank


def test_held_out_pages_give_one_region_per_word() -> None:
    for page in ocr_pages.held_out_pages(400):
        assert [word for word, *_ in ocr_training.word_crops(page)] == list(page.words)


def test_word_crops_refuses_a_page_whose_regions_are_not_one_per_word() -> None:
    page = TRAINING_PAGES[0]
    pixels = page.pixels.copy()
    pixels[2:6, 2:6] = 0  # a blot in the margin: one region too many
    with pytest.raises(ValueError, match="not one per word"):
        ocr_training.word_crops(ocr_pages.Page(pixels, page.words))


def test_the_exported_recognizer_computes_the_trained_classifier() -> None:
    weights = ocr_training.train(pages=8, epochs=2)
    cut = [crop for page in TRAINING_PAGES for _, _, crop, _ in ocr_training.word_crops(page)]
    logits = onnx_run(ocr_models.recognizer_model(weights), {"crops": np.stack(cut)[:, None]})["logits"]
    hidden_w = weights.hidden_w.reshape(weights.hidden_w.shape[0], -1)
    out_w = weights.out_w.reshape(weights.out_w.shape[0], -1)
    for crop, served in zip(cut, logits, strict=True):
        hidden = np.maximum(0.0, ocr_training.windows(crop) @ hidden_w.T + weights.hidden_b)
        np.testing.assert_allclose(served, hidden @ out_w.T + weights.out_b, rtol=1e-4, atol=1e-4)


def test_training_is_deterministic() -> None:
    first, second = ocr_training.train(pages=8, epochs=2), ocr_training.train(pages=8, epochs=2)
    for name in ("hidden_w", "hidden_b", "out_w", "out_b"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))


def test_ocr_reading_counts_strings_and_digits() -> None:
    reading = checks.OcrReading([["123", "45"], ["9"], []], [["123", "46"], ["9", "8"], ["7"]])
    assert reading.strings == (1, 5)  # the pages whose region count is off read nothing
    assert reading.digits == (4, 8)
    assert checks.edit_distance("1234", "124") == 1 and checks.edit_distance("", "12") == 2
    assert checks.edit_distance("7", "1") == 1 and checks.edit_distance("12", "12") == 0
