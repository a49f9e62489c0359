"""Pages for the OCR example: a few "words" per page, each a string of handwritten digits side by side.

A word is 3 to 5 digit images (`ensemble_examples.digits`, drawn `DIGIT_SCALE` times larger) standing on a
dark underline, so the detector sees one connected region per word; words are far enough apart to stay
separate regions. Dark ink on white paper, `PAGE_SIZE` pixels: exactly what `ocr_preprocess` outputs, so it
resizes nothing. The demo and the tests draw held-out digits; the recognizer is trained on pages drawn from
training digits the same way. Pure apart from the PNG encoding; seeded, so a page is the same everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ensemble_examples import digits

DIGIT_SCALE = 3  # each 8x8 digit is drawn 24x24
CELL = digits.DIGIT_SIZE * DIGIT_SCALE  # the pitch of the digits in a word, in page pixels
UNDERLINE = 2  # rows of full ink right under the digits: what joins a word's digits into one region
WORD_LENGTHS = (3, 5)  # digits per word, both included
PAGE_SIZE = (288, 96)  # width, height
# Where words start (left, top of the digits), in reading order; each moves by up to JITTER pixels.
WORD_SLOTS = ((12, 12), (156, 12), (12, 58), (156, 58))
JITTER = 8
MAX_WORDS = len(WORD_SLOTS)


@dataclass(frozen=True, slots=True)
class Word:
    text: str  # the true digits
    left: int  # left edge of the first digit's cell, page pixels
    top: int  # top of the digits' cells

    @property
    def box(self) -> tuple[int, int, int, int]:
        """left, top, right, bottom (exclusive) of the digits and their underline."""
        return self.left, self.top, self.left + CELL * len(self.text), self.top + CELL + UNDERLINE


@dataclass(frozen=True, slots=True)
class Page:
    pixels: npt.NDArray[np.uint8]  # grey (height, width), 255 = paper
    words: tuple[Word, ...]  # in reading order

    @property
    def truth(self) -> list[str]:
        return [word.text for word in self.words]

    def png(self) -> bytes:
        return digits.png(self.pixels)


def draw_page(source: digits.Digits, seed: int, words: int = MAX_WORDS) -> Page:
    """A page of `words` (0..MAX_WORDS) words whose digits are drawn at random from `source` (seeded)."""
    if not 0 <= words <= MAX_WORDS:
        raise ValueError(f"a page holds 0..{MAX_WORDS} words, not {words}")
    rng = np.random.default_rng(seed)
    ink = np.zeros((PAGE_SIZE[1], PAGE_SIZE[0]), dtype=np.float32)
    placed = []
    for left, top in WORD_SLOTS[:words]:
        length = int(rng.integers(WORD_LENGTHS[0], WORD_LENGTHS[1] + 1))
        chosen = rng.integers(len(source), size=length)
        shift_x, shift_y = rng.integers(0, JITTER + 1, size=2)
        x, y = left + int(shift_x), top + int(shift_y)
        for index, digit in enumerate(chosen):
            cell = source.ink[digit].repeat(DIGIT_SCALE, axis=0).repeat(DIGIT_SCALE, axis=1)
            ink[y : y + CELL, x + index * CELL : x + (index + 1) * CELL] = cell
        ink[y + CELL : y + CELL + UNDERLINE, x : x + CELL * length] = 1.0
        placed.append(Word("".join(str(int(source.labels[d])) for d in chosen), x, y))
    return Page(digits.grey(ink), tuple(placed))


def held_out_pages(strings: int, first_seed: int = 0, source: digits.Digits | None = None) -> list[Page]:
    """Pages holding `strings` words in all (full pages, then the rest), drawn from held-out digits (`source`
    when they come from a file, `digits.load`, rather than from scikit-learn)."""
    held_out = source if source is not None else digits.split().held_out
    pages: list[Page] = []
    for seed in range(first_seed, first_seed + (strings + MAX_WORDS - 1) // MAX_WORDS):
        pages.append(draw_page(held_out, seed, min(MAX_WORDS, strings - MAX_WORDS * len(pages))))
    return pages
