"""Training the OCR recognizer: pages of training digits, cut up the way the served pipeline cuts them.

Each training page (`ocr_pages.draw_page` over `digits.split().train`) goes through a numpy equivalent of
`ocr_preprocess` -> `text_detector` -> `crop_boxes` (the tests check it against the real models), so the
recognizer learns from exactly the crops it will be served. Every crop is cut into `TIME_STEPS` windows
centred on its steps; a step is labelled with the digit whose cell's middle it lies on, and blank near the
boundaries between cells and past the word, so greedy CTC decoding (merge repeats, drop blanks) of perfect
step labels gives the word back, repeated digits included. A one-hidden-layer MLP (scikit-learn, seeded)
learns the step labels; `ocr_models.recognizer_model` turns it into two convolutions.
"""

from __future__ import annotations

import warnings
from functools import cache

import numpy as np
import numpy.typing as npt

from ensemble_examples import configs, digits, ocr_models, ocr_pages

TRAINING_PAGES = 1000  # 4,000 words, about 16,000 digits drawn from the 1,347 training digits
TRAINING_SEED = 1_000_000  # page seeds TRAINING_SEED.. (held-out pages use small seeds: no page repeats)
HIDDEN = 96
EPOCHS = 25
PAST_THE_WORD = 2  # steps kept after a word's last one (all the steps after it see nothing but paper)
MIDDLE = (0.25, 0.75)  # the part of a digit's cell whose steps are labelled with the digit
Box = tuple[int, int, int, int]  # top, left, bottom, right (inclusive), detector pixels


def page_image(pixels: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    """`ocr_preprocess` for a page of `ocr_pages.PAGE_SIZE`: grey / 255, nothing to resize."""
    if pixels.shape != (ocr_models.OCR_IMAGE_HEIGHT, ocr_models.OCR_IMAGE_WIDTH):
        raise ValueError(f"pages are {ocr_pages.PAGE_SIZE[::-1]} pixels, not {pixels.shape}")
    image: npt.NDArray[np.float32] = pixels.astype(np.float32) / np.float32(255.0)
    return image


def heat(image: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """`text_detector` in numpy: sigmoid(gain * (5x5 max of the 3x3 mean of 1 - image - 0.5))."""
    from numpy.lib.stride_tricks import sliding_window_view

    ink = np.pad(1.0 - image, 1).astype(np.float32)
    mean = sliding_window_view(ink, (3, 3)).sum(axis=(-2, -1), dtype=np.float32) / np.float32(9.0)
    half = ocr_models.DETECTOR_WIDEN // 2
    widened = sliding_window_view(np.pad(mean, half, constant_values=-np.inf), (ocr_models.DETECTOR_WIDEN,) * 2)
    raw = (widened.max(axis=(-2, -1)) - np.float32(ocr_models.DETECTOR_LEVEL)) * np.float32(ocr_models.DETECTOR_GAIN)
    result: npt.NDArray[np.float32] = (1.0 / (1.0 + np.exp(-raw))).astype(np.float32)
    return result


def regions(heatmap: npt.NDArray[np.float32]) -> list[Box]:
    """`crop_boxes`' regions: 4-connected heat above the threshold, at least `min_pixels` large."""
    from scipy import ndimage  # type: ignore[import-untyped]  # comes with scikit-learn

    labels, count = ndimage.label(heatmap > configs.OCR_THRESHOLD)
    sizes = np.bincount(labels.ravel(), minlength=count + 1)
    found = []
    for index, where in enumerate(ndimage.find_objects(labels), start=1):
        if where is not None and sizes[index] >= configs.OCR_MIN_PIXELS:
            rows, cols = where
            found.append((rows.start, cols.start, rows.stop - 1, cols.stop - 1))
    return found


def crop(image: npt.NDArray[np.float32], box: Box) -> tuple[npt.NDArray[np.float32], int]:
    """`crop_boxes`' crop of one region: scaled to CROP_HEIGHT, paper to the right; and its scaled width."""
    from PIL import Image

    top, left, bottom, right = box
    region = Image.fromarray(np.ascontiguousarray(image[top : bottom + 1, left : right + 1]))  # mode F
    height, width = ocr_models.CROP_HEIGHT, ocr_models.CROP_WIDTH
    scaled = min(width, max(1, round(region.width * height / region.height)))
    out = np.ones((height, width), dtype=np.float32)
    out[:, :scaled] = np.asarray(region.resize((scaled, height), resample=Image.Resampling.BILINEAR))
    return out, scaled


def windows(crop_pixels: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """The recognizer's view of one crop: [TIME_STEPS, CROP_HEIGHT * WINDOW] ink, zero (paper) padded."""
    pad = (ocr_models.WINDOW - ocr_models.STEP) // 2
    ink = np.pad(1.0 - crop_pixels, ((0, 0), (pad, pad)))
    starts = range(0, ocr_models.TIME_STEPS * ocr_models.STEP, ocr_models.STEP)
    return np.stack([ink[:, s : s + ocr_models.WINDOW].ravel() for s in starts]).astype(np.float32)


def step_labels(word: ocr_pages.Word, box: Box, scaled: int) -> npt.NDArray[np.int64]:
    """Per step: 1 + the digit whose cell's middle the step's centre lies on, else 0 (the blank)."""
    _, left, _, right = box
    labels = np.zeros(ocr_models.TIME_STEPS, dtype=np.int64)
    for step in range(ocr_models.TIME_STEPS):
        centre = step * ocr_models.STEP + ocr_models.STEP / 2  # in crop pixels
        if centre >= scaled:
            continue
        cell = (left + centre * (right - left + 1) / scaled - word.left) / ocr_pages.CELL
        index, part = int(np.floor(cell)), cell - np.floor(cell)
        if 0 <= index < len(word.text) and MIDDLE[0] <= part < MIDDLE[1]:
            labels[step] = 1 + int(word.text[index])
    return labels


def word_crops(page: ocr_pages.Page) -> list[tuple[ocr_pages.Word, Box, npt.NDArray[np.float32], int]]:
    """Each drawn word with the one region found over it, its crop and its scaled width, in reading order.

    Raises ValueError when the regions found are not one per word (the page builder's promise broken)."""
    image = page_image(page.pixels)
    found = regions(heat(image))
    matched = []
    for word in page.words:
        left, top, right, bottom = word.box
        over = [b for b in found if b[1] <= left and b[0] <= top and b[3] >= right - 1 and b[2] >= bottom - 1]
        if len(over) != 1 or len(found) != len(page.words):
            raise ValueError(f"regions {found} are not one per word for words at {[w.box for w in page.words]}")
        matched.append((word, over[0], *crop(image, over[0])))
    return matched


def training_set(pages: int = TRAINING_PAGES) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """Step windows and labels from `pages` pages of training digits."""
    train = digits.split().train
    features, labels = [], []
    for seed in range(TRAINING_SEED, TRAINING_SEED + pages):
        for word, box, pixels, scaled in word_crops(ocr_pages.draw_page(train, seed)):
            steps = min(ocr_models.TIME_STEPS, scaled // ocr_models.STEP + PAST_THE_WORD)  # the rest is paper
            features.append(windows(pixels)[:steps])
            labels.append(step_labels(word, box, scaled)[:steps])
    return np.concatenate(features), np.concatenate(labels)


@cache
def trained_recognizer() -> ocr_models.RecognizerWeights:
    """The recognizer's weights, trained once per process; the same on every run (fixed seeds)."""
    return train(TRAINING_PAGES, EPOCHS)


def train(pages: int, epochs: int) -> ocr_models.RecognizerWeights:
    """A recognizer trained for `epochs` epochs on the steps of `pages` training pages (seeded)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    features, labels = training_set(pages)
    classifier = MLPClassifier(
        hidden_layer_sizes=(HIDDEN,), batch_size=256, max_iter=epochs, random_state=0, tol=0.0, n_iter_no_change=epochs
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a fixed number of epochs is the plan
        classifier.fit(features, labels)
    classes = len(ocr_models.ALPHABET)
    if classifier.classes_.tolist() != list(range(classes)):
        raise RuntimeError(f"training steps cover classes {classifier.classes_.tolist()}, not 0..{classes - 1}")
    hidden_w, out_w = (np.asarray(w, dtype=np.float32) for w in classifier.coefs_)
    hidden_b, out_b = (np.asarray(b, dtype=np.float32) for b in classifier.intercepts_)
    return ocr_models.RecognizerWeights(
        hidden_w.T.reshape(HIDDEN, 1, ocr_models.CROP_HEIGHT, ocr_models.WINDOW),
        hidden_b,
        out_w.T.reshape(classes, HIDDEN, 1, 1),
        out_b,
    )
