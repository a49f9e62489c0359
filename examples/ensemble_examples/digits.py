"""The handwritten digits the example models learn from: scikit-learn's `load_digits` (1,797 8x8 images, 16 grey
levels, shipped inside the scikit-learn package: nothing is downloaded), split once into a training part and a
held-out part, and drawn as the pictures a client would send (dark ink on white paper).

Every model trained from these digits uses `split().train` only; the demo and the tests measure on
`split().held_out`. The split is stratified and seeded, so it is the same on every machine.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

DIGIT_SIZE = 8  # sklearn's images are 8x8
INK_LEVELS = 16  # pixel values 0 (paper) .. 16 (full ink)
HELD_OUT_FRACTION = 0.25
SPLIT_SEED = 0
PAPER = 255  # grey level of blank paper in the drawn pictures


@dataclass(frozen=True, slots=True)
class Digits:
    """Ink images (N, 8, 8) float32 in [0, 1] (1 = full ink) and their labels (N,) int64 in 0..9."""

    ink: npt.NDArray[np.float32]
    labels: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def take(self, count: int) -> Digits:
        """The first `count` digits (the split is already shuffled, so these are a fair sample)."""
        return Digits(self.ink[:count], self.labels[:count])


@dataclass(frozen=True, slots=True)
class Split:
    train: Digits
    held_out: Digits


@cache
def split() -> Split:
    """The training and held-out digits (about 1,347 and 450), the same on every call and machine."""
    from sklearn.datasets import load_digits  # only model building and the demo need scikit-learn
    from sklearn.model_selection import train_test_split

    data: Any = load_digits()
    ink = (np.asarray(data.images, dtype=np.float32) / INK_LEVELS).astype(np.float32)
    labels = np.asarray(data.target, dtype=np.int64)
    ink_train, ink_held, labels_train, labels_held = train_test_split(
        ink, labels, test_size=HELD_OUT_FRACTION, random_state=SPLIT_SEED, stratify=labels
    )
    return Split(Digits(ink_train, labels_train), Digits(ink_held, labels_held))


def grey(ink: npt.NDArray[np.float32], scale: int = 1) -> npt.NDArray[np.uint8]:
    """Ink (..., H, W) in [0, 1] -> grey uint8 (..., H*scale, W*scale), dark ink on white paper; each pixel
    becomes a `scale` x `scale` block (nearest neighbour, so averaging the blocks gives the ink back)."""
    pixels: npt.NDArray[np.uint8] = np.rint(PAPER * (1.0 - np.clip(ink, 0.0, 1.0))).astype(np.uint8)
    if scale > 1:
        pixels = pixels.repeat(scale, axis=-2).repeat(scale, axis=-1)
    return pixels


def png(pixels: npt.NDArray[np.uint8]) -> bytes:
    """Grey (H, W) uint8 pixels as RGB PNG bytes, the kind of file a client uploads."""
    from PIL import Image  # Pillow: only the picture helpers need it

    buffer = io.BytesIO()
    Image.fromarray(pixels, mode="L").convert("RGB").save(buffer, format="PNG")
    return buffer.getvalue()


def save(digits: Digits, path: Path) -> None:
    """Write `digits` to `path` as a small .npz (ink in its 17 levels as uint8): what a client in a pod, where
    scikit-learn is not installed, reads with `load` (the demo ships the held-out digits in a ConfigMap)."""
    levels = np.rint(digits.ink * INK_LEVELS).astype(np.uint8)
    with path.open("wb") as handle:
        np.savez_compressed(handle, levels=levels, labels=digits.labels)


def load(path: Path) -> Digits:
    """The digits `save` wrote to `path`."""
    with np.load(path) as data:
        ink = (data["levels"].astype(np.float32) / INK_LEVELS).astype(np.float32)
        return Digits(ink, data["labels"].astype(np.int64))
