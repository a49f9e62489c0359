"""The segmentation and OCR scenarios: ONNX models in onnxruntime, Python models in the runtime's Python
backend, repository configs through the runtime's checks, and both ensembles end to end over gRPC."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
from ensemble_examples import checks, client, digits, ocr_models, ocr_pages, onnx_models, segmentation_models
from ensemble_examples.repository import build_repository, model_names, write_image_png
from ensemble_runtime.backends.base import LoadContext
from ensemble_runtime.backends.python import PythonBackend
from ensemble_runtime.config.model_config import apply_defaults, check_config, read_config
from ensemble_runtime.config.onnx_autocomplete import read_graph_io
from ensemble_runtime.ensemble.graph import build_graph
from ensemble_runtime.inference import BackendRequest
from google.protobuf import text_format
from PIL import Image
from tritonclient.grpc import model_config_pb2 as mc

from tests.support.ports import free_port
from tests.unit.examples.in_process import serving_in_process

Arrays = dict[str, npt.NDArray[Any]]
T = TypeVar("T")

NEW_ONNX = ("segmenter", "text_detector", "text_recognizer")
NEW_PYTHON = ("crop_boxes", "ctc_decode", "ocr_preprocess")
NEW_ENSEMBLES = ("ocr_pipeline", "seg_pipeline")
CROP_SHAPE = (1, ocr_models.CROP_HEIGHT, ocr_models.CROP_WIDTH)
PAGE_SHAPE = (1, 1, ocr_models.OCR_IMAGE_HEIGHT, ocr_models.OCR_IMAGE_WIDTH)


def held_out_page(words: int, seed: int = 0) -> ocr_pages.Page:
    return ocr_pages.draw_page(digits.split().held_out, seed, words)


def onnx_run(model: onnx.ModelProto, feeds: Arrays) -> Arrays:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def one_bytes(value: bytes) -> npt.NDArray[np.object_]:
    array = np.empty(1, dtype=np.object_)
    array[0] = value
    return array


def parse(root: Path, name: str) -> mc.ModelConfig:
    config = mc.ModelConfig()
    text_format.Parse((root / name / "config.pbtxt").read_text(encoding="utf-8"), config)
    return config


async def _execute(repo: Path, name: str, inputs: Mapping[str, npt.NDArray[Any]]) -> Any:
    config = read_config(repo / name)
    assert config is not None
    backend = PythonBackend()
    version_path = repo / name / "1"

    async def no_bls(request: Any) -> Any:
        raise AssertionError(f"{name} made a BLS call")

    context = LoadContext(
        config=backend.prepare_config(apply_defaults(config, name), version_path),
        version=1,
        version_path=version_path,
        model_path=repo / name,
        caller=no_bls,
    )
    (instance,) = await backend.load(context)
    try:
        return (await instance.execute([BackendRequest(dict(inputs), ())]))[0]
    finally:
        await instance.close()


def run_python(repo: Path, name: str, inputs: Mapping[str, npt.NDArray[Any]]) -> Any:
    """Outputs of one request to the Python model `name` (or the exception it answered with)."""
    return asyncio.run(_execute(repo, name, inputs))


def ocr_chain(repo: Path, image: bytes) -> tuple[Arrays, list[bytes]]:
    """The five OCR steps run one after the other, outside any server: (crop_boxes' outputs, strings)."""
    pre = run_python(repo, "ocr_preprocess", {"image_bytes": one_bytes(image)})
    heatmap = onnx_run(ocr_models.text_detector(), {"image": pre["image"]})["heatmap"]
    cropped = run_python(
        repo, "crop_boxes", {"heatmap": heatmap, "image": pre["image"], "image_size": pre["image_size"]}
    )
    logits = onnx_run(ocr_models.text_recognizer(), {"crops": cropped["crops"]})["logits"]
    text = run_python(repo, "ctc_decode", {"logits": logits})["text"]
    return cropped, list(text)


# --- ONNX models ------------------------------------------------------------------------------------------


def test_segmenter_classifies_saturated_colours_and_leaves_grey_as_background() -> None:
    colours = np.array([[128, 128, 128], [230, 20, 20], [20, 200, 20], [20, 20, 230], [0, 0, 0], [255, 255, 255]])
    pixels = np.broadcast_to(colours[:, None, None, :], (6, 32, 32, 3)).astype(np.uint8)
    images = np.stack([onnx_models.normalise(p) for p in pixels])
    out = onnx_run(segmentation_models.segmenter(), {"image": images})
    assert (out["mask_logits"].shape, out["mask_logits"].dtype) == ((6, 4, 32, 32), np.dtype(np.float32))
    assert (out["mask"].shape, out["mask"].dtype) == ((6, 32, 32), np.dtype(np.int64))
    assert [int(np.unique(m)[0]) for m in out["mask"]] == [0, 1, 2, 3, 0, 0]
    np.testing.assert_array_equal(out["mask"], out["mask_logits"].argmax(axis=1))


def test_text_detector_lights_up_ink_only() -> None:
    page = np.ones(PAGE_SHAPE, dtype=np.float32)
    page[0, 0, 20:30, 10:40] = 0.0
    heat = onnx_run(ocr_models.text_detector(), {"image": page})["heatmap"]
    assert (heat.shape, heat.dtype) == (PAGE_SHAPE, np.dtype(np.float32))
    assert heat[0, 0, 18:32, 8:42].min() > 0.99  # ink, widened by 2 pixels
    assert heat[0, 0, :15].max() < 0.01 and heat[0, 0, 35:].max() < 0.01 and heat[0, 0, :, 45:].max() < 0.01


@pytest.mark.parametrize("regions", [0, 1, 5])
def test_text_recognizer_gives_per_column_logits_for_any_number_of_crops(regions: int) -> None:
    crops = np.random.default_rng(regions).uniform(0, 1, (regions, *CROP_SHAPE)).astype(np.float32)
    logits = onnx_run(ocr_models.text_recognizer(), {"crops": crops})["logits"]
    assert logits.shape == (regions, ocr_models.TIME_STEPS, len(ocr_models.ALPHABET))
    assert logits.dtype == np.float32


@pytest.mark.parametrize("build", [segmentation_models.segmenter, ocr_models.text_detector, ocr_models.text_recognizer])
def test_new_onnx_models_are_valid_and_deterministic(build: Callable[[], onnx.ModelProto], tmp_path: Path) -> None:
    model = build()
    assert model.ir_version == onnx_models.IR_VERSION
    assert [(o.domain, o.version) for o in model.opset_import] == [("", onnx_models.OPSET)]
    onnx_models.save(model, tmp_path / "a.onnx")
    onnx_models.save(build(), tmp_path / "b.onnx")
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()


# --- Python models ----------------------------------------------------------------------------------------


def test_ocr_preprocess_gives_a_grey_page_and_the_original_size(example_repo: Path) -> None:
    page = held_out_page(1)
    out = run_python(example_repo, "ocr_preprocess", {"image_bytes": one_bytes(page.png())})
    assert isinstance(out, dict)
    assert (out["image"].shape, out["image"].dtype) == (PAGE_SHAPE, np.dtype(np.float32))
    assert out["image_size"].tolist() == [ocr_pages.PAGE_SIZE[1], ocr_pages.PAGE_SIZE[0]]
    np.testing.assert_array_equal(out["image"][0, 0], page.pixels / np.float32(255))  # a page: nothing resized
    assert out["image_size"].dtype == np.int32
    page = out["image"][0, 0]
    assert page.max() == pytest.approx(1.0) and page.min() < 0.2  # white paper, dark ink


def test_ocr_preprocess_refuses_bad_requests(example_repo: Path) -> None:
    bad = run_python(example_repo, "ocr_preprocess", {"image_bytes": one_bytes(b"not an image")})
    assert isinstance(bad, BaseException) and "cannot decode image" in str(bad)
    two = np.array([write_image_png(), write_image_png()], dtype=np.object_)
    refused = run_python(example_repo, "ocr_preprocess", {"image_bytes": two})
    assert isinstance(refused, BaseException) and "one image per request" in str(refused)


def test_crop_boxes_cuts_one_crop_per_region_in_reading_order(example_repo: Path) -> None:
    heatmap = np.zeros((1, 1, 64, 64), dtype=np.float32)
    heatmap[0, 0, 40:44, 2:20] = 0.9  # second line
    heatmap[0, 0, 10:16, 30:60] = 0.9  # first line, right
    heatmap[0, 0, 11:15, 2:20] = 0.8  # first line, left
    heatmap[0, 0, 60, 60] = 0.9  # one pixel: noise
    image = np.linspace(0, 1, 64 * 64, dtype=np.float32).reshape(1, 1, 64, 64)
    size = np.array([128, 256], dtype=np.int32)  # height, width: boxes scale by 2 down and 4 across
    out = run_python(example_repo, "crop_boxes", {"heatmap": heatmap, "image": image, "image_size": size})
    assert isinstance(out, dict)
    assert out["boxes"].dtype == np.int32
    assert out["boxes"].tolist() == [[8, 22, 80, 30], [120, 20, 240, 32], [8, 80, 80, 88]]
    assert (out["crops"].shape, out["crops"].dtype) == ((3, *CROP_SHAPE), np.dtype(np.float32))
    assert out["crops"][0, 0, 0, 0] == pytest.approx(image[0, 0, 11, 2])
    # scaled to the crop's height, aspect kept (4x18 -> 16x72, 6x30 -> 16x80), paper to the right
    for crop, width in zip(out["crops"][:, 0], (72, 80, 72), strict=True):
        assert (crop[:, width:] == 1.0).all() and (crop[:, :width] < 1.0).all()


def test_crop_boxes_answers_no_region_with_empty_tensors(example_repo: Path) -> None:
    blank = np.zeros((1, 1, 64, 64), dtype=np.float32)
    size = np.array([64, 64], dtype=np.int32)
    out = run_python(example_repo, "crop_boxes", {"heatmap": blank, "image": blank, "image_size": size})
    assert isinstance(out, dict)
    assert out["crops"].shape == (0, *CROP_SHAPE) and out["boxes"].shape == (0, 4)


def test_ctc_decode_merges_repeats_and_drops_blanks(example_repo: Path) -> None:
    alphabet = ocr_models.ALPHABET
    rows = ["33-4", "----", "1-11"]
    logits = np.zeros((3, 4, len(alphabet)), dtype=np.float32)
    for row, chars in enumerate(rows):
        for column, char in enumerate(chars):
            logits[row, column, alphabet.index(char)] = 5.0
    out = run_python(example_repo, "ctc_decode", {"logits": logits})
    assert isinstance(out, dict)
    assert out["text"].tolist() == [b"34", b"", b"11"]
    empty = run_python(example_repo, "ctc_decode", {"logits": np.zeros((0, 16, len(alphabet)), np.float32)})
    assert empty["text"].shape == (0,)
    wrong = run_python(example_repo, "ctc_decode", {"logits": np.zeros((1, 16, 5), np.float32)})
    assert isinstance(wrong, BaseException) and "alphabet" in str(wrong)


@pytest.mark.parametrize("words", range(ocr_pages.MAX_WORDS + 1))
def test_ocr_steps_find_exactly_the_drawn_words(example_repo: Path, words: int) -> None:
    page = held_out_page(words)
    cropped, text = ocr_chain(example_repo, page.png())
    assert cropped["boxes"].shape == (words, 4) and len(text) == words
    for (left, top, right, bottom), word in zip(cropped["boxes"].tolist(), page.words, strict=True):
        # each box is its word's digits and underline, widened by the detector (3 pixels at most)
        word_left, word_top, word_right, word_bottom = word.box
        assert 0 <= word_left - left <= 3 and 0 <= right - word_right <= 3 and 0 <= bottom - word_bottom <= 3
        assert word_top - 3 <= top <= word_top + ocr_pages.DIGIT_SCALE
    assert ocr_chain(example_repo, page.png())[1] == text  # deterministic


def test_ocr_pages() -> None:
    page = held_out_page(2)
    with Image.open(io.BytesIO(page.png())) as image:
        assert (image.format, image.size, image.mode) == ("PNG", ocr_pages.PAGE_SIZE, "RGB")
    assert page.png() == held_out_page(2).png() != held_out_page(3).png()
    assert held_out_page(3).truth[:2] == page.truth  # the same seed draws the same first words
    lengths = {len(word) for p in ocr_pages.held_out_pages(40) for word in p.truth}
    assert lengths == set(range(ocr_pages.WORD_LENGTHS[0], ocr_pages.WORD_LENGTHS[1] + 1))
    assert [len(p.words) for p in ocr_pages.held_out_pages(10)] == [4, 4, 2]
    with pytest.raises(ValueError, match=r"0\.\.4 words"):
        held_out_page(5)


# --- repository -------------------------------------------------------------------------------------------


def test_new_models_are_in_the_repository_in_triton_layout(example_repo: Path) -> None:
    assert set(NEW_ONNX + NEW_PYTHON + NEW_ENSEMBLES) <= set(model_names())
    for name in NEW_ONNX:
        assert [p.name for p in (example_repo / name / "1").iterdir()] == ["model.onnx"]
    for name in NEW_PYTHON:
        assert [p.name for p in (example_repo / name / "1").iterdir()] == ["model.py"]
    for name in (*NEW_ONNX, *NEW_PYTHON, *NEW_ENSEMBLES):
        config = parse(example_repo, name)
        check_config(apply_defaults(config, name), name)
        expected = (
            ("ensemble", "")
            if name in NEW_ENSEMBLES
            else ("onnxruntime_onnx", "")
            if name in NEW_ONNX
            else ("", "python")
        )
        assert (config.platform, config.backend) == expected


def test_new_onnx_configs_match_their_graphs(example_repo: Path) -> None:
    for name in NEW_ONNX:
        config = parse(example_repo, name)
        batch = [-1] if config.max_batch_size > 0 else []
        inputs, outputs = read_graph_io(example_repo / name / "1" / "model.onnx")
        for declared, graph in ((config.input, inputs), (config.output, outputs)):
            assert [(t.name, t.data_type, [*batch, *t.dims]) for t in declared] == graph, name


def test_new_ensembles_pass_the_runtime_validation(example_repo: Path) -> None:
    loaded = {name: parse(example_repo, name) for name in model_names()}
    versions = {name: [1] for name in loaded}
    seg = build_graph(loaded["seg_pipeline"], loaded, versions)
    assert seg.step_models() == {"image_preprocess", "classifier_a", "image_postprocess", "segmenter"}
    assert all(loaded[step].max_batch_size >= loaded["seg_pipeline"].max_batch_size > 0 for step in seg.step_models())
    ocr = build_graph(loaded["ocr_pipeline"], loaded, versions)
    assert len(ocr.steps) == 5
    assert all(loaded[name].max_batch_size == 0 for name in (*ocr.step_models(), "ocr_pipeline"))


def test_only_builds_a_new_pipeline_with_what_it_needs(tmp_path: Path) -> None:
    assert build_repository(tmp_path, only=["ocr_pipeline"]) == sorted(
        ("ocr_pipeline", *NEW_PYTHON, "text_detector", "text_recognizer")
    )


# --- end to end over gRPC ---------------------------------------------------------------------------------


async def _serve(repo: Path, port: int, call: Callable[[Any], T]) -> T:
    async with serving_in_process(repo, port):

        def with_client() -> T:
            with grpcclient.InferenceServerClient(url=f"127.0.0.1:{port}") as triton:
                client.wait_ready(triton, 30.0)
                return call(triton)

        return await asyncio.to_thread(with_client)


def serve(repo: Path, call: Callable[[Any], T]) -> T:
    """`call(client)` against the runtime serving `repo` over gRPC, in this process."""
    return asyncio.run(_serve(repo, free_port(), call))


def test_seg_pipeline_end_to_end(example_repo: Path) -> None:
    images = [segmentation_models.demo_image(), write_image_png(seed=1), write_image_png(seed=1)]
    result = serve(example_repo, lambda c: checks.check_seg_pipeline(c, images))
    assert result.mask.shape == (3, 32, 32) and len(result.labels) == 3
    assert all(count > 0 for count in result.histogram(0).values())  # every class in the demo image
    assert result.histogram(0)["red"] == 16 * 16  # the top-left quarter
    np.testing.assert_array_equal(result.mask[1], result.mask[2])
    assert result.labels[1] == result.labels[2]


def test_ocr_pipeline_end_to_end(example_repo: Path) -> None:
    def calls(triton: Any) -> list[checks.OcrResult]:
        return [checks.check_ocr_pipeline(triton, held_out_page(words).png()) for words in (3, 3, 0, 4)]

    three, again, none, four = serve(example_repo, calls)
    assert three.boxes.shape == (3, 4) and len(three.text) == 3
    np.testing.assert_array_equal(three.boxes, again.boxes)
    assert three.text == again.text
    assert none.boxes.shape == (0, 4) and none.text == []
    assert len(four.text) == 4 and four.text[:3] == three.text
    offline = ocr_chain(example_repo, held_out_page(3).png())
    assert three.boxes.tolist() == offline[0]["boxes"].tolist()
    assert three.text == [t.decode() for t in offline[1]]


def test_ocr_pipeline_reads_held_out_digit_strings(example_repo: Path) -> None:
    def calls(triton: Any) -> tuple[checks.OcrReading, checks.OcrReading, BaseException | None]:
        first, second = checks.check_ocr_reading(triton), checks.check_ocr_reading(triton, strings=8)
        try:
            checks.check_ocr_reading(triton, strings=8, floors=(1.01, 0.0))
        except client.CheckFailed as exc:
            return first, second, exc
        return first, second, None

    reading, again, failed = serve(example_repo, calls)
    assert reading.truth == [p.truth for p in ocr_pages.held_out_pages(checks.OCR_STRINGS)]
    assert [len(read) for read in reading.read] == [len(truth) for truth in reading.truth]  # one region per word
    (strings, words), (right, total) = reading.strings, reading.digits
    assert words == checks.OCR_STRINGS and total == sum(len(t) for truth in reading.truth for t in truth)
    print(f"held-out: {strings}/{words} strings, {right}/{total} digits")
    assert strings >= checks.OCR_FLOORS[0] * words and right >= checks.OCR_FLOORS[1] * total
    assert again.read == reading.read[:2]  # deterministic
    assert isinstance(failed, client.CheckFailed) and "below the floor 101%" in str(failed)


def test_check_functions_of_the_other_scenarios(example_repo: Path) -> None:
    def calls(triton: Any) -> tuple[Any, ...]:
        return (
            checks.check_image_pipeline(triton),
            checks.check_dual_classifier(triton),
            checks.check_text_pipeline(triton, list(client.SENTENCES)),
        )

    labels, dual, text = serve(example_repo, calls)
    assert len(labels) == 2 and all(len(row) == 3 for row in labels)
    assert len(dual) == 3 and len(text) == len(client.SENTENCES)


def test_checks_raise_on_wrong_shapes_and_dtypes() -> None:
    with pytest.raises(client.CheckFailed, match=r"image_pipeline: 'labels' is object \[2, 2\]"):
        checks._expect("image_pipeline", "labels", np.zeros((2, 2), np.object_), (2, 3), "O")
    with pytest.raises(client.CheckFailed, match=r"expected kind i \[\*, 4\]"):
        checks._expect("ocr_pipeline", "boxes", np.zeros((1, 4), np.float32), (None, 4), "i")
    checks._expect("ocr_pipeline", "boxes", np.zeros((0, 4), np.int32), (None, 4), "i")
