"""build_graph validation (one case per error class) and execution plans."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from ensemble_runtime.config.model_config import ConfigError, ModelConfig, parse_config_text
from ensemble_runtime.ensemble import EnsembleGraph, build_graph
from ensemble_runtime.errors import ErrorCode, InferenceError
from tritonclient.grpc import model_config_pb2 as mc

PIPELINE = """
name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IMAGE" data_type: TYPE_UINT8 dims: [ -1 ] } ]
output [ { name: "LABELS" data_type: TYPE_STRING dims: [ 5 ] } ]
ensemble_scheduling {
  step [
    { model_name: "image_pre" model_version: -1
      input_map { key: "RAW" value: "IMAGE" } output_map { key: "PIXELS" value: "pixels" } },
    { model_name: "resnet" model_version: -1
      input_map { key: "data" value: "pixels" } output_map { key: "logits" value: "logits" } },
    { model_name: "image_post" model_version: -1
      input_map { key: "LOGITS" value: "logits" } output_map { key: "LABELS" value: "LABELS" } }
  ]
}
"""

MODELS = {
    "image_pre": """
name: "image_pre" backend: "python" max_batch_size: 8
input [ { name: "RAW" data_type: TYPE_UINT8 dims: [ -1 ] } ]
output [ { name: "PIXELS" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
""",
    "resnet": """
name: "resnet" platform: "onnxruntime_onnx" max_batch_size: 8
input [ { name: "data" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 1000 ] } ]
""",
    "image_post": """
name: "image_post" backend: "python" max_batch_size: 8
input [ { name: "LOGITS" data_type: TYPE_FP32 dims: [ 1000 ] } ]
output [ { name: "LABELS" data_type: TYPE_STRING dims: [ 5 ] } ]
""",
}


@dataclass
class Repo:
    ensemble: ModelConfig
    models: dict[str, ModelConfig]
    versions: dict[str, set[int]] = field(default_factory=dict)

    def build(self) -> EnsembleGraph:
        return build_graph(self.ensemble, self.models, self.versions)

    def step(self, index: int) -> mc.ModelEnsembling.Step:
        return self.ensemble.ensemble_scheduling.step[index]

    def tensor(self, model: str, kind: str, name: str) -> mc.ModelInput:
        tensors = self.models[model].input if kind == "input" else self.models[model].output
        return next(t for t in tensors if t.name == name)


def pipeline() -> Repo:
    models = {name: parse_config_text(text) for name, text in MODELS.items()}
    return Repo(parse_config_text(PIPELINE), models, {name: {1, 2} for name in models})


def _cycle(repo: Repo) -> None:
    # resnet also reads 'labels2', which only image_post (downstream of resnet) writes
    extra = repo.models["resnet"].input.add(name="hint", data_type=mc.TYPE_STRING)
    extra.dims.append(5)
    repo.step(1).input_map["hint"] = "labels2"
    repo.models["image_post"].output.add(name="AGAIN", data_type=mc.TYPE_STRING).dims.append(5)
    repo.step(2).output_map["AGAIN"] = "labels2"


def _unproduced(repo: Repo) -> None:
    repo.step(1).input_map["data"] = "pixelz"


def _output_unproduced(repo: Repo) -> None:
    repo.ensemble.output.add(name="SCORES", data_type=mc.TYPE_FP32).dims.append(1000)


def _two_producers(repo: Repo) -> None:
    twin = repo.ensemble.ensemble_scheduling.step.add(model_name="resnet", model_version=-1)
    twin.input_map["data"] = "pixels"
    twin.output_map["logits"] = "logits"


def _produces_input(repo: Repo) -> None:
    repo.step(0).output_map["PIXELS"] = "IMAGE"


def _dtype(repo: Repo) -> None:
    repo.tensor("resnet", "input", "data").data_type = mc.TYPE_FP16


def _shape(repo: Repo) -> None:
    repo.tensor("resnet", "input", "data").dims[:] = [3, 256, 256]


def _output_shape(repo: Repo) -> None:
    repo.ensemble.output[0].dims[:] = [10]


def _small_batch(repo: Repo) -> None:
    repo.models["resnet"].max_batch_size = 4


def _missing_model(repo: Repo) -> None:
    del repo.models["resnet"]


def _missing_version(repo: Repo) -> None:
    repo.step(1).model_version = 3


def _bad_input_key(repo: Repo) -> None:
    del repo.step(1).input_map["data"]
    repo.step(1).input_map["dataa"] = "pixels"


def _bad_output_key(repo: Repo) -> None:
    del repo.step(1).output_map["logits"]
    repo.step(1).output_map["logitz"] = "logits"


def _unmapped_input(repo: Repo) -> None:
    repo.models["resnet"].input.add(name="mask", data_type=mc.TYPE_BOOL).dims.append(224)


def _nested(repo: Repo) -> None:
    repo.models["resnet"].platform = "ensemble"


def _unused_input(repo: Repo) -> None:
    repo.ensemble.input.add(name="EXTRA", data_type=mc.TYPE_FP32).dims.append(1)


def _unused_tensor(repo: Repo) -> None:
    repo.models["resnet"].output.add(name="features", data_type=mc.TYPE_FP32).dims.append(2048)
    repo.step(1).output_map["features"] = "features"


ERROR_CASES: list[tuple[str, Callable[[Repo], None], list[str]]] = [
    ("cycle", _cycle, ["cycle", "step 1 (model 'resnet')", "step 2 (model 'image_post')"]),
    ("consumed never produced", _unproduced, ["step 1 (model 'resnet') input 'data'", "'pixelz'"]),
    ("ensemble output unproduced", _output_unproduced, ["ensemble output 'SCORES'"]),
    ("two producers", _two_producers, ["step 3 (model 'resnet') output 'logits'", "'logits'", "step 1"]),
    ("step writes ensemble input", _produces_input, ["step 0 (model 'image_pre')", "'IMAGE'"]),
    ("dtype", _dtype, ["'pixels'", "step 1 (model 'resnet') input 'data'", "TYPE_FP32", "TYPE_FP16"]),
    ("shape", _shape, ["'pixels'", "step 1 (model 'resnet') input 'data'", "[-1,3,256,256]"]),
    ("ensemble output shape", _output_shape, ["'LABELS'", "ensemble output 'LABELS'", "[-1,10]"]),
    ("step batch below ensemble", _small_batch, ["step 1 (model 'resnet')", "max_batch_size 8", "4"]),
    ("model missing", _missing_model, ["step 1 (model 'resnet')", "does not exist"]),
    ("pinned version missing", _missing_version, ["step 1 (model 'resnet')", "3", "available: 1, 2"]),
    ("input_map key", _bad_input_key, ["step 1 (model 'resnet')", "'dataa'", "'pixels'"]),
    ("output_map key", _bad_output_key, ["step 1 (model 'resnet')", "'logitz'", "'logits'"]),
    ("unmapped input", _unmapped_input, ["step 1 (model 'resnet') input 'mask'", "not mapped"]),
    ("nested ensemble", _nested, ["step 1 (model 'resnet')", "nested ensembles are not supported"]),
    ("unused ensemble input", _unused_input, ["'EXTRA'", "never used"]),
    ("unused step output", _unused_tensor, ["'features'", "step 1 (model 'resnet') output", "never used"]),
]


@pytest.mark.parametrize(
    ("mutate", "expected"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES]
)
def test_invalid_ensembles_name_step_and_tensor(mutate: Callable[[Repo], None], expected: list[str]) -> None:
    repo = pipeline()
    repo.build()  # the unmodified pipeline is valid, so the mutation is what fails
    mutate(repo)
    with pytest.raises(ConfigError) as caught:
        repo.build()
    message = str(caught.value)
    assert message.startswith("ensemble 'pipeline': ")
    for fragment in expected:
        assert fragment in message, message


def test_not_an_ensemble() -> None:
    repo = pipeline()
    with pytest.raises(ConfigError, match="'resnet' is not an ensemble"):
        build_graph(repo.models["resnet"], repo.models, repo.versions)


def test_valid_pipeline_graph() -> None:
    repo = pipeline()
    repo.step(1).model_version = 2
    graph = repo.build()
    assert [(s.index, s.model_name, s.model_version) for s in graph.steps] == [
        (0, "image_pre", -1),
        (1, "resnet", 2),
        (2, "image_post", -1),
    ]
    assert dict(graph.steps[1].input_map) == {"data": "pixels"}
    assert dict(graph.steps[1].output_map) == {"logits": "logits"}
    assert dict(graph.producer) == {"pixels": 0, "logits": 1, "LABELS": 2}
    assert dict(graph.consumers) == {"IMAGE": (0,), "pixels": (1,), "logits": (2,)}
    assert graph.inputs == ("IMAGE",)
    assert graph.outputs == ("LABELS",)
    assert graph.topological_order == (0, 1, 2)
    assert graph.step_models() == {"image_pre", "resnet", "image_post"}


def _wildcard(repo: Repo) -> None:
    repo.tensor("resnet", "input", "data").dims[1] = -1


def _non_batching_step_full_shape(repo: Repo) -> None:
    # Triton: a batching ensemble may hold a non-batching model whose shapes spell out the batch dim
    repo.models["resnet"].max_batch_size = 0
    repo.tensor("resnet", "input", "data").dims.insert(0, -1)
    repo.tensor("resnet", "output", "logits").dims.insert(0, -1)


def _output_reshape(repo: Repo) -> None:
    repo.ensemble.output[0].dims[:] = [1, 5]
    repo.ensemble.output[0].reshape.shape.append(5)


def _version_zero(repo: Repo) -> None:
    repo.step(1).model_version = 0  # proto3's unset value; treated as -1 (latest)


@pytest.mark.parametrize("mutate", [_wildcard, _non_batching_step_full_shape, _output_reshape, _version_zero])
def test_accepted_variants(mutate: Callable[[Repo], None]) -> None:
    repo = pipeline()
    mutate(repo)
    graph = repo.build()
    assert [s.model_name for s in graph.steps] == ["image_pre", "resnet", "image_post"]
    assert graph.steps[1].model_version == -1


def test_non_batching_ensemble_compares_full_dims() -> None:
    repo = pipeline()
    repo.ensemble.max_batch_size = 0
    for model in repo.models.values():
        model.max_batch_size = 0
    repo.build()
    repo.tensor("resnet", "input", "data").dims.insert(0, 1)
    with pytest.raises(ConfigError, match=r"shape mismatch: .*\[3,224,224\] .*\[1,3,224,224\]"):
        repo.build()


FAN = """
name: "fan" platform: "ensemble" max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "DIFF" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "LEFT" data_type: TYPE_FP32 dims: [ 4 ] }
]
ensemble_scheduling { step [
  { model_name: "left" input_map { key: "X" value: "IN" } output_map { key: "Y" value: "a" } },
  { model_name: "right" input_map { key: "X" value: "IN" } output_map { key: "Y" value: "b" } },
  { model_name: "combine" input_map [ { key: "A" value: "a" }, { key: "B" value: "b" } ]
    output_map [ { key: "SUM" value: "SUM" }, { key: "DIFF" value: "DIFF" } ] },
  { model_name: "copy" input_map { key: "X" value: "a" } output_map { key: "Y" value: "LEFT" } }
] }
"""


def _unary(name: str) -> str:
    return f"""name: "{name}" backend: "python"
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }} ]"""


COMBINE = """name: "combine" backend: "python"
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "SCALE" data_type: TYPE_FP32 dims: [ 1 ] optional: true } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "DIFF" data_type: TYPE_FP32 dims: [ 4 ] } ]"""


def fan_graph() -> EnsembleGraph:
    models = {name: parse_config_text(_unary(name)) for name in ("left", "right", "copy")}
    models["combine"] = parse_config_text(COMBINE)
    return build_graph(parse_config_text(FAN), models, {name: {1} for name in models})


def test_fan_out_fan_in_graph_and_plans() -> None:
    graph = fan_graph()  # 'combine' leaves its optional input SCALE unmapped: allowed
    assert dict(graph.consumers) == {"IN": (0, 1), "a": (2, 3), "b": (2,)}
    everything = graph.plan([])
    assert [p.step.model_name for p in everything.steps] == ["left", "right", "combine", "copy"]
    assert everything.initial == (0, 1)
    assert [p.dependency_count for p in everything.steps] == [0, 0, 2, 1]
    assert everything.steps[0].dependents == (2, 3)
    assert everything.outputs == ("SUM", "DIFF", "LEFT")
    assert everything.required_inputs == ("IN",)

    only_left = graph.plan(["LEFT"])
    assert [p.step.model_name for p in only_left.steps] == ["left", "copy"]
    assert only_left.outputs == ("LEFT",)

    only_diff = graph.plan({"DIFF"})
    assert [p.step.model_name for p in only_diff.steps] == ["left", "right", "combine"]
    assert only_diff.steps[2].requested == ("DIFF",)  # SUM is not asked for
    assert only_diff.steps[0].requested == ("Y",)


def test_plans_are_cached_per_requested_set() -> None:
    graph = fan_graph()
    assert graph.plan(["SUM", "LEFT"]) is graph.plan(("LEFT", "SUM"))
    assert graph.plan([]) is graph.plan([])
    assert graph.plan(["SUM"]) is not graph.plan(["LEFT"])


def test_plan_refuses_unknown_output() -> None:
    with pytest.raises(InferenceError) as caught:
        fan_graph().plan(["NOPE"])
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert "ensemble 'fan' has no output 'NOPE'" in caught.value.message
