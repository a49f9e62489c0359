"""Parse `config.pbtxt` into Triton's ModelConfig and apply Triton's defaults. Pure, apart from reading text."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

ModelConfig = mc.ModelConfig

ONNX_PLATFORM = "onnxruntime_onnx"
ENSEMBLE_PLATFORM = "ensemble"
TENSORRT_PLATFORM = "tensorrt_plan"

# platform -> backend, as Triton resolves them
_PLATFORM_BACKEND = {
    ONNX_PLATFORM: "onnxruntime",
    TENSORRT_PLATFORM: "tensorrt",
    ENSEMBLE_PLATFORM: "",
}
_BACKEND_PLATFORM = {"onnxruntime": ONNX_PLATFORM, "tensorrt": TENSORRT_PLATFORM}
_DEFAULT_FILENAMES = {"onnxruntime": "model.onnx", "python": "model.py", "tensorrt": "model.plan"}
KNOWN_BACKENDS = frozenset({"onnxruntime", "python", "tensorrt"})


class ConfigError(ValueError):
    """A model configuration that cannot be served; the message names the problem."""


def parse_config_text(text: str, source: str = "config.pbtxt") -> mc.ModelConfig:
    config = mc.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply") from None
    except ValueError as exc:  # a value the field cannot hold (e.g. an enum number past 32 bits)
        raise ConfigError(f"{source}: {exc}") from None
    return config


def read_config(model_dir: Path) -> mc.ModelConfig | None:
    path = model_dir / "config.pbtxt"
    if not path.is_file():
        return None
    return parse_config_text(path.read_text(encoding="utf-8"), str(path))


def backend_of(config: mc.ModelConfig) -> str:
    if config.backend:
        return str(config.backend)
    return _PLATFORM_BACKEND.get(str(config.platform), "")


def is_ensemble(config: mc.ModelConfig) -> bool:
    return bool(config.platform == ENSEMBLE_PLATFORM)


def model_filename(config: mc.ModelConfig) -> str:
    if config.default_model_filename:
        return str(config.default_model_filename)
    return _DEFAULT_FILENAMES.get(backend_of(config), "model")


def apply_defaults(config: mc.ModelConfig, name: str) -> mc.ModelConfig:
    """Fill in what Triton fills in: name, platform/backend pairing, version policy, instance groups."""
    out = mc.ModelConfig()
    out.CopyFrom(config)
    if not out.name:
        out.name = name
    if out.backend and not out.platform and out.backend in _BACKEND_PLATFORM:
        out.platform = _BACKEND_PLATFORM[out.backend]
    if out.platform and not out.backend and out.platform in _PLATFORM_BACKEND:
        out.backend = _PLATFORM_BACKEND[out.platform]
    if not out.HasField("version_policy") or (out.version_policy.HasField("latest") and out.version_policy.latest.num_versions == 0):
        out.version_policy.latest.num_versions = 1
    if not is_ensemble(out):
        if not out.instance_group:
            group = out.instance_group.add()
            group.kind = mc.ModelInstanceGroup.KIND_CPU
            group.count = 1
        for index, group in enumerate(out.instance_group):
            if not group.name:
                group.name = f"{out.name}_{index}"
            if group.count == 0:
                group.count = 1
            if group.kind == mc.ModelInstanceGroup.KIND_AUTO:
                group.kind = mc.ModelInstanceGroup.KIND_GPU if group.gpus else mc.ModelInstanceGroup.KIND_CPU
    return out


def check_config(config: mc.ModelConfig, directory_name: str) -> None:
    """Refuse what Triton refuses; messages name the field and the value."""
    if config.name != directory_name:
        raise ConfigError(
            f"model name '{config.name}' in config.pbtxt does not match its directory '{directory_name}'"
        )
    backend = backend_of(config)
    if not is_ensemble(config):
        if not backend:
            raise ConfigError(
                f"model '{config.name}': no backend or platform given "
                f"(platform '{config.platform}' is not one this runtime knows)"
            )
        if backend not in KNOWN_BACKENDS:
            raise ConfigError(
                f"model '{config.name}': unknown backend '{backend}' (supported: {', '.join(sorted(KNOWN_BACKENDS))})"
            )
    if config.max_batch_size < 0:
        raise ConfigError(f"model '{config.name}': max_batch_size must be >= 0, got {config.max_batch_size}")
    for kind, tensors in (("input", config.input), ("output", config.output)):
        seen: set[str] = set()
        for tensor in tensors:
            if not tensor.name:
                raise ConfigError(f"model '{config.name}': an {kind} has no name")
            if tensor.name in seen:
                raise ConfigError(f"model '{config.name}': {kind} '{tensor.name}' is declared twice")
            seen.add(tensor.name)
            if tensor.data_type == mc.TYPE_INVALID:
                raise ConfigError(f"model '{config.name}': {kind} '{tensor.name}' has no data_type")
            if tensor.data_type not in mc.DataType.values():  # text format takes any number for an enum
                raise ConfigError(
                    f"model '{config.name}': {kind} '{tensor.name}' has unknown data_type {tensor.data_type}"
                )
            for dim in tensor.dims:
                if dim < -1 or dim == 0:
                    raise ConfigError(
                        f"model '{config.name}': {kind} '{tensor.name}' has invalid dimension {dim} "
                        "(dims are positive or -1)"
                    )
    if config.HasField("dynamic_batching") and config.max_batch_size == 0:
        # Triton accepts this with a warning and ignores batching; we do the same.
        pass
    for size in config.dynamic_batching.preferred_batch_size:
        if config.max_batch_size and size > config.max_batch_size:
            raise ConfigError(
                f"model '{config.name}': preferred_batch_size {size} exceeds max_batch_size {config.max_batch_size}"
            )


def parse_config_override(text: str, source: str) -> mc.ModelConfig:
    """A config given through the load API: Triton sends JSON; pbtxt text is accepted too."""
    if text.lstrip().startswith("{"):
        config = mc.ModelConfig()
        try:
            json_format.Parse(text, config)
        except json_format.ParseError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        except RecursionError:
            raise ConfigError(f"{source}: nested too deeply") from None
        return config
    return parse_config_text(text, source)
