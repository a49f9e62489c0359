"""Every path a model config names stays inside that model's directory. Pure, apart from resolving symlinks.

A config (from `config.pbtxt`, or from the load API's `config` override) names files relative to the model:
`default_model_filename` and `cc_model_filenames` under a version directory, an output's `label_filename`
under the model directory, a warm-up sample's `input_data_file` under `<model>/warmup/`, and the
`trt_engine_cache_path` accelerator parameter (a directory ONNX Runtime writes engines to: here relative to
the runtime's cache directory for that model version; Triton takes it as given). Each must be a relative path
without `..` segments, and must still lie inside its directory once symlinks are resolved; otherwise the config is refused with an error naming the field. Checked when the config
is read (`check_config_paths`, before anything is imported or opened) and again where each file is opened
(`confined`), so no config value reaches the filesystem unchecked.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.model_config import ConfigError

WARMUP_DIR = "warmup"
TRT_CACHE_PARAMETER = "trt_engine_cache_path"


class Anchor(enum.Enum):
    """The directory a config path is relative to."""

    VERSION = "version"  # <model>/<version>/
    MODEL = "model"  # <model>/
    WARMUP = "warmup"  # <model>/warmup/, which must itself stay inside <model>/
    CACHE = "cache"  # the runtime's cache directory for the model version (checked where it is used)


@dataclass(frozen=True, slots=True)
class ConfigPath:
    field: str  # the config field, as an error names it (e.g. "output 'probs' label_filename")
    value: str
    anchor: Anchor


def check_relative(value: str, field: str, model: str) -> None:
    """Refuse what can never name a file inside a directory: absolute paths, `..`, NUL, empty segments."""
    where = f"model '{model}': {field} '{value}'"
    if "\x00" in value:
        raise ConfigError(f"{where} contains a NUL character")
    if "\\" in value:
        raise ConfigError(f"{where} contains a backslash; use '/' to separate directories")
    path = PurePosixPath(value)
    if path.is_absolute() or value.startswith("~"):
        raise ConfigError(f"{where} is an absolute path; it must be relative to the model's directory")
    if ".." in path.parts:
        raise ConfigError(f"{where} contains '..'; it must stay inside the model's directory")
    if not path.parts or path.parts == (".",):
        raise ConfigError(f"{where} names no file")


def confined(base: Path, value: str, field: str, model: str, *, within: Path | None = None) -> Path:
    """`base / value`, refused unless it lies inside `within` (default `base`) once symlinks are resolved.

    The returned path is the joined one (messages and relative imports keep the names the author used).
    """
    check_relative(value, field, model)
    candidate = base / value
    root = (within if within is not None else base).resolve()
    resolved = candidate.resolve()
    if resolved != root and not resolved.is_relative_to(root):
        raise ConfigError(
            f"model '{model}': {field} '{value}' resolves outside the model's directory (through a symbolic link)"
        )
    return candidate


def config_paths(config: mc.ModelConfig) -> Iterator[ConfigPath]:
    """Every path-valued entry of `config` (empty values mean 'the default' and are left out)."""
    if config.default_model_filename:
        yield ConfigPath("default_model_filename", config.default_model_filename, Anchor.VERSION)
    for capability, filename in sorted(config.cc_model_filenames.items()):
        yield ConfigPath(f"cc_model_filenames['{capability}']", filename, Anchor.VERSION)
    for output in config.output:
        if output.label_filename:
            yield ConfigPath(f"output '{output.name}' label_filename", output.label_filename, Anchor.MODEL)
    for sample in config.model_warmup:
        for name, spec in sorted(sample.inputs.items()):
            if spec.WhichOneof("input_data_type") == "input_data_file":
                field = f"model_warmup '{sample.name}' input '{name}' input_data_file"
                yield ConfigPath(field, spec.input_data_file, Anchor.WARMUP)
    accelerators = config.optimization.execution_accelerators
    for kind, group in (("gpu", accelerators.gpu_execution_accelerator),
                        ("cpu", accelerators.cpu_execution_accelerator)):
        for accelerator in group:
            value = accelerator.parameters.get(TRT_CACHE_PARAMETER, "")
            if value:
                field = f"{kind}_execution_accelerator '{accelerator.name}' parameter {TRT_CACHE_PARAMETER}"
                yield ConfigPath(field, value, Anchor.CACHE)


def check_config_paths(config: mc.ModelConfig, model_dir: Path, version_dirs: Iterable[Path]) -> None:
    """Refuse `config` (ConfigError naming the field) if any path it names leaves `model_dir` (or, for model
    files, each version directory they are read from)."""
    entries = list(config_paths(config))
    for entry in entries:
        check_relative(entry.value, entry.field, config.name)
    versions = list(version_dirs)
    for entry in entries:
        if entry.anchor is Anchor.VERSION:
            for version_dir in versions:
                confined(version_dir, entry.value, entry.field, config.name)
        elif entry.anchor is Anchor.MODEL:
            confined(model_dir, entry.value, entry.field, config.name)
        elif entry.anchor is Anchor.WARMUP:
            warmup_file(config, model_dir, entry.value, entry.field)


def model_file(config: mc.ModelConfig, version_dir: Path, filename: str) -> Path:
    """The model file (`filename`: the config's default_model_filename or the backend's default), checked."""
    return confined(version_dir, filename, "default_model_filename", config.name)


def warmup_file(config: mc.ModelConfig, model_dir: Path, value: str, field: str) -> Path:
    """A warm-up sample's data file: `<model>/warmup/<value>`, checked."""
    return confined(model_dir / WARMUP_DIR, value, field, config.name, within=model_dir)
