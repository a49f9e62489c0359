"""Demo client: exercise every example model over the KServe v2 / Triton gRPC protocol.

    python -m ensemble_examples.client --url localhost:8001

Waits for the server, lists the repository, runs each pipeline, checks the answers and prints them.
Exits 1 if any check fails (2 if the server never became ready).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from ensemble_examples import configs

SENTENCES = (
    "the movie was wonderful and the actors were great",
    "a dull, slow and forgettable evening",
    "service was quick",
    "I would not recommend this place to anyone",
)
THRESHOLD = 0.5
OCR_PAGES_SHOWN = 3  # pages whose reading the demo prints next to the truth
EXAMPLES = 4  # predictions shown next to the truth per pipeline


class CheckFailed(RuntimeError):
    """The server answered, but not what the example models compute."""


@dataclass(frozen=True, slots=True)
class Check:
    title: str
    run: Callable[[Any], list[str]]  # client -> lines to print


def wait_ready(client: Any, timeout_s: float) -> None:
    """Poll until the server says it is ready; raise TimeoutError with the last error after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last = "not ready"
    while True:
        try:
            if client.is_server_ready():
                return
        except InferenceServerException as exc:
            last = str(exc)
        if time.monotonic() >= deadline:
            raise TimeoutError(f"server not ready after {timeout_s:.0f}s ({last})")
        time.sleep(0.5)


def _bytes_input(name: str, values: Sequence[bytes]) -> Any:
    array = np.empty((len(values), 1), dtype=np.object_)
    array[:, 0] = list(values)
    tensor = grpcclient.InferInput(name, list(array.shape), "BYTES")
    tensor.set_data_from_numpy(array)
    return tensor


def _input(name: str, array: npt.NDArray[Any], datatype: str) -> Any:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def _infer(client: Any, model: str, inputs: list[Any], outputs: Sequence[str]) -> dict[str, npt.NDArray[Any]]:
    requested = [grpcclient.InferRequestedOutput(name) for name in outputs]
    result = client.infer(model, inputs, outputs=requested)
    arrays: dict[str, npt.NDArray[Any]] = {}
    for name in outputs:
        array = result.as_numpy(name)
        if array is None:
            raise CheckFailed(f"{model}: the response has no output '{name}'")
        arrays[name] = array
    return arrays


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def repository_index(client: Any) -> list[str]:
    models: list[dict[str, str]] = client.get_model_repository_index(as_json=True).get("models", [])
    lines = []
    for model in models:
        version = model.get("version") or "-"
        state = model.get("state") or "UNKNOWN"
        reason = f" ({model['reason']})" if model.get("reason") else ""
        lines.append(f"{model.get('name', '?'):<18} version {version:<3} {state}{reason}")
    expected = {
        "image_pipeline",
        "dual_classifier",
        "text_pipeline",
        "bls_router",
        "add_sub",
        *configs.ROUTES,
    }
    missing = sorted(expected - {model.get("name", "") for model in models})
    if missing:
        raise CheckFailed(f"repository index lacks {', '.join(missing)}")
    return lines


def image_pipeline(client: Any) -> list[str]:
    from ensemble_examples import held_out  # builds on this module's helpers

    pictures, truth = held_out.held_out_digits()
    labels = held_out.top_labels(client, pictures)
    read = [int(top[0][0]) for top in labels]
    accuracy = held_out.score("classifier_a (top-1)", read, truth.tolist())
    held_out.require([accuracy], held_out.DIGIT_FLOOR, "image_pipeline")
    lines = [
        f"{len(pictures)} held-out handwritten digits (scikit-learn's, never trained on), sent as 32x32 PNGs",
        accuracy.line() + f"  (floor {100 * held_out.DIGIT_FLOOR:.0f}%)",
    ]
    shown = _examples(read, truth.tolist(), EXAMPLES)
    for index in shown:
        top = ", ".join(f"{label}:{probability:.3f}" for label, probability in labels[index])
        mark = "" if read[index] == truth[index] else "   <- wrong"
        lines.append(f"digit #{index:<3} truth {truth[index]}: {top}{mark}")
    return lines


def dual_classifier(client: Any) -> list[str]:
    from ensemble_examples import held_out  # builds on this module's helpers

    pictures, truth = held_out.held_out_digits()
    reads = {
        "classifier_a alone": held_out.classifier_digits(client, pictures, "classifier_a"),
        "classifier_b alone": held_out.classifier_digits(client, pictures, "classifier_b"),
        "ensemble (dual_classifier)": held_out.ensemble_digits(client, pictures),
    }
    scores = [held_out.score(name, read, truth.tolist()) for name, read in reads.items()]
    held_out.require(scores, held_out.DIGIT_FLOOR, "dual_classifier")
    a, b, both = reads.values()
    disagree = [i for i in range(len(truth)) if a[i] != b[i]]
    settled = sum(1 for i in disagree if both[i] == truth[i])
    lines = [
        f"{len(pictures)} held-out digits; a: an MLP, b: a logistic regression; ensemble: argmax of the sum of"
        " their log-probabilities",
        *(s.line() for s in scores),
        f"a and b disagree on {len(disagree)} digits; the ensemble is right on {settled} of them",
    ]
    for index in _examples(both, truth.tolist(), EXAMPLES, prefer=disagree):
        mark = "" if both[index] == truth[index] else "   <- wrong"
        lines.append(f"digit #{index:<3} truth {truth[index]}: a {a[index]}, b {b[index]} -> ensemble {both[index]}{mark}")
    return lines


def _examples(read: Sequence[int], truth: Sequence[int], count: int, prefer: Sequence[int] = ()) -> list[int]:
    """Indices of a few digits to show: those in `prefer`, then a wrong one if any, then the first ones."""
    wrong = [i for i in range(len(truth)) if read[i] != truth[i]]
    shown: list[int] = []
    for index in [*prefer[: count - 1], *wrong[:1], *range(len(truth))]:
        if index not in shown and len(shown) < count:
            shown.append(index)
    return sorted(shown)


def text_pipeline(client: Any) -> list[str]:
    from ensemble_examples import held_out, text_corpus  # builds on this module's helpers

    reviews = held_out.held_out_sentences(first=SENTENCES)
    results = held_out.sentence_verdicts(client, [review.text for review in reviews])
    accuracy = held_out.score("held-out sentences", [r.verdict for r in results], [r.positive for r in reviews])
    held_out.require([accuracy], held_out.TEXT_FLOOR, "text_pipeline")
    lines = [
        f"text_scorer: logistic regression trained on {len(text_corpus.TRAIN)} short reviews the project wrote"
        " (ensemble_examples.text_corpus)",
        accuracy.line() + f"  (floor {100 * held_out.TEXT_FLOOR:.0f}%)",
    ]
    for review, result in zip(reviews[: len(SENTENCES)], results, strict=False):
        verdict = "positive" if result.verdict else "negative"
        mark = "" if result.verdict == review.positive else "   <- wrong"
        lines.append(f"{result.probability:.3f} {verdict:<8} {review.text!r}{mark}")
    return lines


def bls_router(client: Any) -> list[str]:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    expected = {"model_a": x * 2.0, "model_b": x + 100.0}
    lines = []
    for route, model in enumerate(configs.ROUTES):
        inputs = [_input("route", np.array([route], dtype=np.int32), "INT32"), _input("X", x, "FP32")]
        out = _infer(client, "bls_router", inputs, ["Y", "model"])
        used = _text(out["model"].reshape(-1)[0])
        if used != model or not np.allclose(out["Y"], expected[model]):
            raise CheckFailed(f"bls_router: route {route} answered by '{used}' with Y={out['Y'].tolist()}")
        lines.append(f"route {route} -> {used}: Y[0] = {out['Y'][0].tolist()}")
    return lines


def add_sub(client: Any) -> list[str]:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.float32)
    out = _infer(
        client, "add_sub", [_input("INPUT0", a, "FP32"), _input("INPUT1", b, "FP32")], ["OUTPUT0", "OUTPUT1"]
    )
    if not (np.array_equal(out["OUTPUT0"], a + b) and np.array_equal(out["OUTPUT1"], a - b)):
        raise CheckFailed(
            f"add_sub: wrong sums/differences {out['OUTPUT0'].tolist()} {out['OUTPUT1'].tolist()}"
        )
    return [
        f"OUTPUT0 = {out['OUTPUT0'][0, :6].tolist()} ...",
        f"OUTPUT1 = {out['OUTPUT1'][0, :6].tolist()} ...",
    ]


def seg_pipeline(client: Any) -> list[str]:
    from ensemble_examples.checks import check_seg_pipeline  # builds on this module's helpers

    result = check_seg_pipeline(client)
    lines = []
    for index, labels in enumerate(result.labels):
        histogram = ", ".join(f"{name} {count}" for name, count in result.histogram(index).items())
        top = ", ".join(f"{label}:{probability:.4f}" for label, probability in labels)
        lines.append(f"image {index}: mask {list(result.mask.shape[1:])} [{histogram}]; labels {top}")
    return lines


def ocr_pipeline(client: Any) -> list[str]:
    from ensemble_examples.checks import OCR_FLOORS, check_ocr_reading  # builds on this module's helpers

    reading = check_ocr_reading(client)
    lines = [
        f"page {index}: read {' '.join(read) or '-'}  (truth {' '.join(truth)}: "
        f"{sum(r == t for r, t in zip(read, truth, strict=False))}/{len(truth)})"
        for index, (read, truth) in enumerate(zip(reading.read[:OCR_PAGES_SHOWN], reading.truth, strict=False))
    ]
    (strings, words), (right, digits) = reading.strings, reading.digits
    lines.append(
        f"held-out: {strings}/{words} strings read exactly ({strings / words:.0%}), {right}/{digits} digits "
        f"({right / digits:.0%}); floors {OCR_FLOORS[0]:.0%}, {OCR_FLOORS[1]:.0%}"
    )
    return lines


CHECKS = (
    Check("repository index", repository_index),
    Check("image_pipeline: digit PNG -> preprocess -> classifier_a -> top-3 digits", image_pipeline),
    Check("dual_classifier: digit PNG -> classifier_a + classifier_b -> argmax of the sum", dual_classifier),
    Check(f"text_pipeline: text -> tokenizer -> text_scorer -> threshold {THRESHOLD}", text_pipeline),
    Check("bls_router: route 0 -> model_a (2X), route 1 -> model_b (X+100)", bls_router),
    Check("add_sub", add_sub),
    Check("seg_pipeline: PNG -> preprocess -> classifier_a + segmenter -> labels + mask", seg_pipeline),
    Check("ocr_pipeline: page of digit strings -> detect -> crop -> recognize -> CTC decode", ocr_pipeline),
)


def run_checks(client: Any, out: TextIO) -> int:
    """Run every check, printing results; return the number that failed."""
    failures = 0
    for check in CHECKS:
        print(f"== {check.title}", file=out)
        try:
            lines = check.run(client)
        except (InferenceServerException, CheckFailed) as exc:
            failures += 1
            print(f"   FAILED: {exc}", file=out)
            continue
        for line in lines:
            print(f"   {line}", file=out)
    print(f"{len(CHECKS) - failures}/{len(CHECKS)} checks passed", file=out)
    return failures


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ensemble_examples.client", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--url", default="localhost:8001", help="gRPC endpoint host:port")
    parser.add_argument("--ready-timeout", type=float, default=60.0, help="seconds to wait for readiness")
    args = parser.parse_args(argv)
    client = grpcclient.InferenceServerClient(url=args.url)
    try:
        try:
            wait_ready(client, args.ready_timeout)
        except TimeoutError as exc:
            print(f"server at {args.url}: {exc}", file=out)
            return 2
        print(f"server at {args.url} is ready", file=out)
        return 1 if run_checks(client, out) else 0
    finally:
        client.close()


if __name__ == "__main__":
    raise SystemExit(main())
