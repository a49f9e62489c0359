"""classifier_a and classifier_b: two digit classifiers of different families, trained on scikit-learn's
handwritten digits (`digits.split().train`) when the example repository is built, exported to ONNX.

Both keep the example classifiers' interface: `image` FP32 [-1,3,32,32], exactly what `image_preprocess`
makes of a picture (RGB, 32x32, CIFAR channel statistics), -> `logits` FP32 [-1,10], log-probabilities of the
digits 0..9 (LogSoftmax, so `combine_argmax`'s sum of the two is the log of a product of probabilities).
Both share the feature part of the graph, which undoes the 4x upscaling of a drawn digit:

    image -> ReduceMean(channels) -> AveragePool 4x4 -> Flatten -> 64 features (one per cell of the 8x8 grid)

- classifier_a: a small neural network (scikit-learn's MLPClassifier): Gemm(32) -> Relu -> Gemm(10).
- classifier_b: multinomial logistic regression (scikit-learn's LogisticRegression): Gemm(10).

The training features are computed by that same graph in onnxruntime, on what `preprocess` (an exact copy of
`image_preprocess`'s arithmetic) makes of the PNGs a client sends, `digits.png(digits.grey(ink, DRAW_SCALE))`,
so training and serving agree. Training is seeded and runs once per process (`functools.cache`).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import cache

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper

from ensemble_examples import digits, onnx_models
from ensemble_examples.onnx_models import _initializer, _model  # package-internal builders

DRAW_SCALE = onnx_models.IMAGE_SIZE // digits.DIGIT_SIZE  # a drawn digit is 32x32: each ink pixel a 4x4 block
FEATURES = digits.DIGIT_SIZE * digits.DIGIT_SIZE
HIDDEN_UNITS = 32
TRAINING_SEED = 0
MLP_MAX_ITERATIONS = 1000
MLP_L2 = 1e-3
LOGISTIC_C = 1.0
LOGISTIC_MAX_ITERATIONS = 5000

_BATCH = "batch"
_IMAGE = helper.make_tensor_value_info(
    "image",
    TensorProto.FLOAT,
    [_BATCH, onnx_models.IMAGE_CHANNELS, onnx_models.IMAGE_SIZE, onnx_models.IMAGE_SIZE],
)
_LOGITS = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [_BATCH, onnx_models.NUM_CLASSES])
_FEATURE_NODES = (
    helper.make_node("ReduceMean", ["image"], ["grey"], axes=[1], keepdims=1),
    helper.make_node(
        "AveragePool", ["grey"], ["grid"], kernel_shape=[DRAW_SCALE, DRAW_SCALE], strides=[DRAW_SCALE, DRAW_SCALE]
    ),
    helper.make_node("Flatten", ["grid"], ["features"], axis=1),
)


@dataclass(frozen=True, slots=True)
class Dense:
    """One Gemm: `x @ weights + bias`; weights (inputs, outputs) float32."""

    weights: npt.NDArray[np.float32]
    bias: npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Trained:
    """The fitted layers, the features' standardisation folded into each model's first layer."""

    mlp: tuple[Dense, Dense]
    logistic: Dense


def preprocess(data: bytes) -> npt.NDArray[np.float32]:
    """Encoded picture -> (3, 32, 32) float32, computed as image_preprocess's `_decode` computes it."""
    from PIL import Image  # Pillow: only model building and the demo need it

    with Image.open(io.BytesIO(data)) as image:
        rgb = image.convert("RGB").resize(
            (onnx_models.IMAGE_SIZE, onnx_models.IMAGE_SIZE), Image.Resampling.BILINEAR
        )
    return onnx_models.normalise(np.asarray(rgb))


def drawn(ink: npt.NDArray[np.float32]) -> bytes:
    """One digit's ink (8, 8) as the PNG a client sends: 32x32, dark ink on white."""
    return digits.png(digits.grey(ink, DRAW_SCALE))


def features(images: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """(N, 3, 32, 32) preprocessed images -> (N, 64) features, by the classifiers' own feature graph."""
    import onnxruntime  # only model building needs it

    graph = helper.make_graph(
        list(_FEATURE_NODES),
        "digit_features",
        [_IMAGE],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [_BATCH, FEATURES])],
    )
    session = onnxruntime.InferenceSession(_model(graph).SerializeToString(), providers=["CPUExecutionProvider"])
    result: npt.NDArray[np.float32] = session.run(["features"], {"image": images})[0]
    return result


def digit_features(data: digits.Digits) -> npt.NDArray[np.float32]:
    """The features the served classifiers compute for each of `data`'s digits, drawn and sent as a PNG."""
    return features(np.stack([preprocess(drawn(ink)) for ink in data.ink]))


@cache
def trained() -> Trained:
    """Fit both classifiers on the training digits (seeded; a few seconds; once per process)."""
    from sklearn.linear_model import LogisticRegression  # only model building needs scikit-learn
    from sklearn.neural_network import MLPClassifier

    train = digits.split().train
    x = digit_features(train).astype(np.float64)
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-3
    standardised = (x - mean) / std
    mlp = MLPClassifier(
        hidden_layer_sizes=(HIDDEN_UNITS,), alpha=MLP_L2, max_iter=MLP_MAX_ITERATIONS, random_state=TRAINING_SEED
    ).fit(standardised, train.labels)
    logistic = LogisticRegression(C=LOGISTIC_C, max_iter=LOGISTIC_MAX_ITERATIONS).fit(standardised, train.labels)
    for model in (mlp, logistic):
        if list(model.classes_) != list(range(onnx_models.NUM_CLASSES)):
            raise ValueError(f"expected classes 0..9, the training digits have {list(model.classes_)}")
    hidden = _folded(np.asarray(mlp.coefs_[0]), np.asarray(mlp.intercepts_[0]), mean, std)
    output = Dense(_fp32(mlp.coefs_[1]), _fp32(mlp.intercepts_[1]))
    return Trained((hidden, output), _folded(np.asarray(logistic.coef_).T, np.asarray(logistic.intercept_), mean, std))


RETRAIN_C_GRID = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0)  # classifier_b's next version picks its C among these
RETRAIN_FOLDS = 5


def classifier_b_retrained() -> onnx.ModelProto:
    """classifier_b's next version, as a team would publish it: the same logistic regression, its
    regularisation C now chosen by 5-fold cross-validation on the training digits (version 1 took C=1.0)
    rather than fixed. A few seconds."""
    from sklearn.linear_model import LogisticRegression  # only model building needs scikit-learn
    from sklearn.model_selection import cross_val_score

    train = digits.split().train
    x = digit_features(train).astype(np.float64)
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-3
    standardised = (x - mean) / std

    def cv_accuracy(c: float) -> float:
        model = LogisticRegression(C=c, max_iter=LOGISTIC_MAX_ITERATIONS)
        return float(cross_val_score(model, standardised, train.labels, cv=RETRAIN_FOLDS).mean())

    best = max(RETRAIN_C_GRID, key=cv_accuracy)
    logistic = LogisticRegression(C=best, max_iter=LOGISTIC_MAX_ITERATIONS).fit(standardised, train.labels)
    layer = _folded(np.asarray(logistic.coef_).T, np.asarray(logistic.intercept_), mean, std)
    return _classifier(f"classifier_b_logistic_c{best:g}", (layer,))


def _fp32(values: object) -> npt.NDArray[np.float32]:
    return np.asarray(values, dtype=np.float32)


def _folded(
    weights: npt.NDArray[np.float64],
    bias: npt.NDArray[np.float64],
    mean: npt.NDArray[np.float64],
    std: npt.NDArray[np.float64],
) -> Dense:
    """A layer fitted on standardised features `(x - mean) / std`, rewritten to take `x` itself."""
    scaled = weights / std[:, np.newaxis]
    return Dense(_fp32(scaled), _fp32(bias - mean @ scaled))


def _classifier(name: str, layers: tuple[Dense, ...]) -> onnx.ModelProto:
    nodes = list(_FEATURE_NODES)
    initializers = []
    current = "features"
    for index, layer in enumerate(layers):
        if index:
            nodes.append(helper.make_node("Relu", [current], [f"hidden{index}"]))
            current = f"hidden{index}"
        weights, bias = f"w{index}", f"b{index}"
        initializers += [_initializer(weights, layer.weights), _initializer(bias, layer.bias)]
        nodes.append(helper.make_node("Gemm", [current, weights, bias], [f"dense{index}"]))
        current = f"dense{index}"
    nodes.append(helper.make_node("LogSoftmax", [current], ["logits"], axis=1))
    return _model(helper.make_graph(nodes, name, [_IMAGE], [_LOGITS], initializers))


def classifier_a(weights: Trained | None = None) -> onnx.ModelProto:
    """The MLP: features -> Gemm(32) -> Relu -> Gemm(10) -> LogSoftmax (`weights`: `trained()`'s)."""
    return _classifier("classifier_a_mlp", (weights or trained()).mlp)


def classifier_b(weights: Trained | None = None) -> onnx.ModelProto:
    """The logistic regression: features -> Gemm(10) -> LogSoftmax (`weights`: `trained()`'s)."""
    return _classifier("classifier_b_logistic", ((weights or trained()).logistic,))
