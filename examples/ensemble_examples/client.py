"""Demo client: exercise every example model over the KServe v2 / Triton gRPC protocol.

    python -m ensemble_examples.client --url localhost:8001
    python -m ensemble_examples.client --kubernetes-names --digits held_out.npz \
        --target dual_classifier=10.96.0.10:8001 --target ocr_pipeline=10.96.0.11:8001

Waits for the server, lists the repository, runs each pipeline, checks the answers and prints them; each check
ends with a line `RESULT <check>: ...` (its headline figures, or why it failed). With `--target` only the named
checks run, each against its own server (an Ensemble's Service); `--kubernetes-names` calls the models by their
Model/Ensemble resource names (dashes for underscores); `--digits` reads the held-out digits from a file
(`digits.save`) where scikit-learn is not installed.
Exits 1 if any check fails (2 if a server never became ready).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from ensemble_examples import configs, digits

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


class Headline(str):
    """A line of a check's output that also goes into its `RESULT` line."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Setting:
    """What the checks run with: where the held-out digits come from and what the server calls the models."""

    held_out: digits.Digits | None = None  # None: scikit-learn's split (digits.split())
    kubernetes_names: bool = False  # Model/Ensemble resource names: dashes for underscores

    def name(self, model: str) -> str:
        return model.replace("_", "-") if self.kubernetes_names else model


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    title: str
    run: Callable[[Any, Setting], list[str]]  # client, setting -> lines to print


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


def repository_index(client: Any, setting: Setting) -> list[str]:
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
    expected = {setting.name(model) for model in expected}
    missing = sorted(expected - {model.get("name", "") for model in models})
    if missing:
        raise CheckFailed(f"repository index lacks {', '.join(missing)}")
    return lines


def image_pipeline(client: Any, setting: Setting) -> list[str]:
    from ensemble_examples import held_out  # builds on this module's helpers

    pictures, truth = held_out.held_out_digits(source=setting.held_out)
    labels = held_out.top_labels(client, pictures, model=setting.name("image_pipeline"))
    read = [int(top[0][0]) for top in labels]
    accuracy = held_out.score("classifier_a (top-1)", read, truth.tolist())
    held_out.require([accuracy], held_out.DIGIT_FLOOR, "image_pipeline")
    lines = [
        f"{len(pictures)} held-out handwritten digits (scikit-learn's, never trained on), sent as 32x32 PNGs",
        Headline(accuracy.line() + f"  (floor {100 * held_out.DIGIT_FLOOR:.0f}%)"),
    ]
    shown = _examples(read, truth.tolist(), EXAMPLES)
    for index in shown:
        top = ", ".join(f"{label}:{probability:.3f}" for label, probability in labels[index])
        mark = "" if read[index] == truth[index] else "   <- wrong"
        lines.append(f"digit #{index:<3} truth {truth[index]}: {top}{mark}")
    return lines


def dual_classifier(client: Any, setting: Setting) -> list[str]:
    from ensemble_examples import held_out  # builds on this module's helpers

    pictures, truth = held_out.held_out_digits(source=setting.held_out)
    preprocess = setting.name("image_preprocess")
    reads = {
        "classifier_a alone": held_out.classifier_digits(client, pictures, setting.name("classifier_a"), preprocess),
        "classifier_b alone": held_out.classifier_digits(client, pictures, setting.name("classifier_b"), preprocess),
        "ensemble (dual_classifier)": held_out.ensemble_digits(client, pictures, setting.name("dual_classifier")),
    }
    scores = [held_out.score(name, read, truth.tolist()) for name, read in reads.items()]
    held_out.require(scores, held_out.DIGIT_FLOOR, "dual_classifier")
    a, b, both = reads.values()
    disagree = [i for i in range(len(truth)) if a[i] != b[i]]
    settled = sum(1 for i in disagree if both[i] == truth[i])
    lines = [
        f"{len(pictures)} held-out digits; a: an MLP, b: a logistic regression; ensemble: argmax of the sum of"
        " their log-probabilities",
        *(Headline(s.line()) for s in scores),
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


def text_pipeline(client: Any, setting: Setting) -> list[str]:
    from ensemble_examples import held_out, text_corpus  # builds on this module's helpers

    reviews = held_out.held_out_sentences(first=SENTENCES)
    results = held_out.sentence_verdicts(client, [review.text for review in reviews], setting.name("text_pipeline"))
    accuracy = held_out.score("held-out sentences", [r.verdict for r in results], [r.positive for r in reviews])
    held_out.require([accuracy], held_out.TEXT_FLOOR, "text_pipeline")
    lines = [
        f"text_scorer: logistic regression trained on {len(text_corpus.TRAIN)} short reviews the project wrote"
        " (ensemble_examples.text_corpus)",
        Headline(accuracy.line() + f"  (floor {100 * held_out.TEXT_FLOOR:.0f}%)"),
    ]
    for review, result in zip(reviews[: len(SENTENCES)], results, strict=False):
        verdict = "positive" if result.verdict else "negative"
        mark = "" if result.verdict == review.positive else "   <- wrong"
        lines.append(f"{result.probability:.3f} {verdict:<8} {review.text!r}{mark}")
    return lines


def bls_router(client: Any, setting: Setting) -> list[str]:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    expected = {"model_a": x * 2.0, "model_b": x + 100.0}
    lines = []
    for route, model in enumerate(configs.ROUTES):
        inputs = [_input("route", np.array([route], dtype=np.int32), "INT32"), _input("X", x, "FP32")]
        out = _infer(client, setting.name("bls_router"), inputs, ["Y", "model"])
        used = _text(out["model"].reshape(-1)[0])
        if used != model or not np.allclose(out["Y"], expected[model]):
            raise CheckFailed(f"bls_router: route {route} answered by '{used}' with Y={out['Y'].tolist()}")
        lines.append(f"route {route} -> {used}: Y[0] = {out['Y'][0].tolist()}")
    return lines


def add_sub(client: Any, setting: Setting) -> list[str]:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.float32)
    out = _infer(
        client, setting.name("add_sub"), [_input("INPUT0", a, "FP32"), _input("INPUT1", b, "FP32")], ["OUTPUT0", "OUTPUT1"]
    )
    if not (np.array_equal(out["OUTPUT0"], a + b) and np.array_equal(out["OUTPUT1"], a - b)):
        raise CheckFailed(
            f"add_sub: wrong sums/differences {out['OUTPUT0'].tolist()} {out['OUTPUT1'].tolist()}"
        )
    return [
        f"OUTPUT0 = {out['OUTPUT0'][0, :6].tolist()} ...",
        f"OUTPUT1 = {out['OUTPUT1'][0, :6].tolist()} ...",
    ]


def seg_pipeline(client: Any, setting: Setting) -> list[str]:
    from ensemble_examples.checks import check_seg_pipeline  # builds on this module's helpers

    result = check_seg_pipeline(client, model=setting.name("seg_pipeline"))
    lines = []
    for index, labels in enumerate(result.labels):
        histogram = ", ".join(f"{name} {count}" for name, count in result.histogram(index).items())
        top = ", ".join(f"{label}:{probability:.4f}" for label, probability in labels)
        lines.append(f"image {index}: mask {list(result.mask.shape[1:])} [{histogram}]; labels {top}")
    return lines


def ocr_pipeline(client: Any, setting: Setting) -> list[str]:
    from ensemble_examples.checks import OCR_FLOORS, check_ocr_reading  # builds on this module's helpers

    reading = check_ocr_reading(client, model=setting.name("ocr_pipeline"), source=setting.held_out)
    lines = [
        f"page {index}: read {' '.join(read) or '-'}  (truth {' '.join(truth)}: "
        f"{sum(r == t for r, t in zip(read, truth, strict=False))}/{len(truth)})"
        for index, (read, truth) in enumerate(zip(reading.read[:OCR_PAGES_SHOWN], reading.truth, strict=False))
    ]
    (strings, words), (right, digits) = reading.strings, reading.digits
    lines.append(Headline(
        f"held-out: {strings}/{words} strings read exactly ({strings / words:.0%}), {right}/{digits} digits "
        f"({right / digits:.0%}); floors {OCR_FLOORS[0]:.0%}, {OCR_FLOORS[1]:.0%}"
    ))
    return lines


CHECKS = (
    Check("repository_index", "repository index", repository_index),
    Check("image_pipeline", "image_pipeline: digit PNG -> preprocess -> classifier_a -> top-3 digits", image_pipeline),
    Check("dual_classifier", "dual_classifier: digit PNG -> classifier_a + classifier_b -> argmax of the sum",
          dual_classifier),
    Check("text_pipeline", f"text_pipeline: text -> tokenizer -> text_scorer -> threshold {THRESHOLD}", text_pipeline),
    Check("bls_router", "bls_router: route 0 -> model_a (2X), route 1 -> model_b (X+100)", bls_router),
    Check("add_sub", "add_sub", add_sub),
    Check("seg_pipeline", "seg_pipeline: PNG -> preprocess -> classifier_a + segmenter -> labels + mask", seg_pipeline),
    Check("ocr_pipeline", "ocr_pipeline: page of digit strings -> detect -> crop -> recognize -> CTC decode",
          ocr_pipeline),
)
CHECK_NAMES = tuple(check.name for check in CHECKS)


def run_check(check: Check, client: Any, setting: Setting, out: TextIO) -> bool:
    """Run one check, printing its lines and its `RESULT` line; whether it passed."""
    print(f"== {check.title}", file=out)
    try:
        lines = check.run(client, setting)
    except (InferenceServerException, CheckFailed) as exc:
        print(f"   FAILED: {exc}", file=out)
        print(f"RESULT {check.name}: FAILED", file=out, flush=True)
        return False
    for line in lines:
        print(f"   {line}", file=out)
    headlines = [" ".join(line.split()) for line in lines if isinstance(line, Headline)]
    print(f"RESULT {check.name}: " + ("; ".join(headlines) if headlines else "passed"), file=out, flush=True)
    return True


def run_checks(client: Any, out: TextIO, setting: Setting | None = None) -> int:
    """Run every check against one server, printing results; return the number that failed."""
    setting = setting or Setting()
    failures = sum(not run_check(check, client, setting, out) for check in CHECKS)
    print(f"{len(CHECKS) - failures}/{len(CHECKS)} checks passed", file=out)
    return failures


def _target(text: str) -> tuple[str, str]:
    name, _, url = text.partition("=")
    if name not in CHECK_NAMES or not url:
        raise argparse.ArgumentTypeError(f"expected CHECK=HOST:PORT with CHECK one of {', '.join(CHECK_NAMES)}")
    return name, url


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ensemble_examples.client", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--url", default="localhost:8001", help="gRPC endpoint host:port (every check)")
    parser.add_argument("--target", type=_target, action="append", default=[], metavar="CHECK=HOST:PORT",
                        help="run only this check, against this server (repeatable)")
    parser.add_argument("--kubernetes-names", action="store_true",
                        help="call the models by their Model/Ensemble resource names (dashes, not underscores)")
    parser.add_argument("--digits", type=Path, default=None, help="held-out digits from this file (digits.save)")
    parser.add_argument("--ready-timeout", type=float, default=60.0, help="seconds to wait for readiness")
    args = parser.parse_args(argv)
    setting = Setting(digits.load(args.digits) if args.digits is not None else None, args.kubernetes_names)
    plan = [(check, dict(args.target)[check.name]) for check in CHECKS if check.name in dict(args.target)]
    if not args.target:
        plan = [(check, args.url) for check in CHECKS]
    failures = 0
    for url in dict.fromkeys(url for _, url in plan):  # each server once, in order
        client = grpcclient.InferenceServerClient(url=url)
        try:
            try:
                wait_ready(client, args.ready_timeout)
            except TimeoutError as exc:
                print(f"server at {url}: {exc}", file=out)
                return 2
            print(f"server at {url} is ready", file=out)
            failures += sum(not run_check(check, client, setting, out) for check, at in plan if at == url)
        finally:
            client.close()
    print(f"{len(plan) - failures}/{len(plan)} checks passed", file=out)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
