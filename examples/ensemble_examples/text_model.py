"""text_scorer: logistic regression on the tokenizer's word ids, trained on the project's own sentences
(`text_corpus.TRAIN`) when the example repository is built, exported to ONNX.

The graph keeps the example's interface and shape: `token_ids` INT64 [-1,16] -> Gather(embedding V x 1) ->
ReduceMean(tokens) -> Gemm(1x1) -> Sigmoid -> `score` FP32 [-1,1], the probability that the text is positive.
The mean over the 16 positions of a per-word weight is a linear model on word counts / 16, so a logistic
regression fitted on counts gives the embedding (its coefficients x 16, padding 0) and the Gemm's bias (its
intercept). The counts come from `token_ids`, an exact copy of the tokenizer Python model's hashing.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper

from ensemble_examples import onnx_models, text_corpus
from ensemble_examples.onnx_models import _initializer, _model  # package-internal builders

WORD = re.compile(r"[a-z0-9']+")  # as in python_models/tokenizer/model.py
PAD = 0
REGULARISATION_C = 3.0
MAX_ITERATIONS = 1000

_BATCH = "batch"


@dataclass(frozen=True, slots=True)
class Trained:
    word_weights: npt.NDArray[np.float32]  # (V,): per id, for counts / length; 0 for padding
    bias: float


def token_ids(
    text: str, vocabulary: int = onnx_models.VOCABULARY_SIZE, length: int = onnx_models.SEQUENCE_LENGTH
) -> list[int]:
    """What the tokenizer model sends for `text`: CRC-32 of each word into 1..vocabulary-1, padded with 0."""
    words = WORD.findall(text.lower())[:length]
    ids = [1 + zlib.crc32(word.encode()) % (vocabulary - 1) for word in words]
    return ids + [PAD] * (length - len(ids))


def counts(texts: Sequence[str]) -> npt.NDArray[np.float64]:
    """(N, V) how often each id occurs in each text's token ids (the padding column stays 0)."""
    table = np.zeros((len(texts), onnx_models.VOCABULARY_SIZE), dtype=np.float64)
    for row, text in enumerate(texts):
        for token in token_ids(text):
            if token != PAD:
                table[row, token] += 1.0
    return table


@cache
def trained() -> Trained:
    """Fit the logistic regression on `text_corpus.TRAIN` (deterministic; well under a second)."""
    from sklearn.linear_model import LogisticRegression  # only model building needs scikit-learn

    texts = [review.text for review in text_corpus.TRAIN]
    labels = np.array([review.positive for review in text_corpus.TRAIN], dtype=np.int64)
    model = LogisticRegression(C=REGULARISATION_C, max_iter=MAX_ITERATIONS).fit(counts(texts), labels)
    weights = np.asarray(model.coef_[0], dtype=np.float64) * onnx_models.SEQUENCE_LENGTH
    weights[PAD] = 0.0  # padding contributes nothing (it never occurs in the counts anyway)
    return Trained(weights.astype(np.float32), float(model.intercept_[0]))


def text_scorer(weights: Trained | None = None) -> onnx.ModelProto:
    """`token_ids` INT64 [-1,16] -> Gather(V x 1) -> ReduceMean(tokens) -> Gemm(1) -> Sigmoid -> `score`
    (`weights`: `trained()`'s)."""
    weights = weights or trained()
    initializers = [
        _initializer("embedding", weights.word_weights.reshape(-1, 1)),
        _initializer("fc_w", np.ones((1, 1), dtype=np.float32)),
        _initializer("fc_b", np.array([weights.bias], dtype=np.float32)),
    ]
    nodes = [
        helper.make_node("Gather", ["embedding", "token_ids"], ["embedded"], axis=0),
        helper.make_node("ReduceMean", ["embedded"], ["mean"], axes=[1], keepdims=0),
        helper.make_node("Gemm", ["mean", "fc_w", "fc_b"], ["raw_score"]),
        helper.make_node("Sigmoid", ["raw_score"], ["score"]),
    ]
    graph = helper.make_graph(
        nodes,
        "text_scorer",
        [helper.make_tensor_value_info("token_ids", TensorProto.INT64, [_BATCH, onnx_models.SEQUENCE_LENGTH])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, [_BATCH, 1])],
        initializers,
    )
    return _model(graph)
