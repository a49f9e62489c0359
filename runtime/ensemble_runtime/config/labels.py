"""The label files a config's outputs name (`label_filename`), read when a model version loads.

As in Triton, the file lies in the model's directory (confined there: `paths.confined`), holds one label per
line (line N is the label of class index N), and a file that cannot be read fails the load. Files are capped
at `MAX_LABEL_FILE_BYTES`, so a config cannot make the runtime read an arbitrarily large file into memory.
"""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.model_config import ConfigError
from ensemble_runtime.config.paths import confined

MAX_LABEL_FILE_BYTES = 16 * 1024 * 1024


def split_labels(text: str) -> tuple[str, ...]:
    """One label per line; a final newline ends the last line rather than adding an empty label."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return tuple(lines)


def read_labels(config: mc.ModelConfig, model_dir: Path) -> dict[str, tuple[str, ...]]:
    """Output name -> its labels, for every output with a `label_filename` (ConfigError naming the file)."""
    labels: dict[str, tuple[str, ...]] = {}
    for output in config.output:
        if not output.label_filename:
            continue
        field = f"output '{output.name}' label_filename"
        path = confined(model_dir, output.label_filename, field, config.name)
        try:
            with path.open("rb") as handle:
                data = handle.read(MAX_LABEL_FILE_BYTES + 1)
        except OSError as exc:
            raise ConfigError(
                f"model '{config.name}': {field} '{output.label_filename}' cannot be read: {exc.strerror or exc}"
            ) from None
        if len(data) > MAX_LABEL_FILE_BYTES:
            raise ConfigError(
                f"model '{config.name}': {field} '{output.label_filename}' is larger than "
                f"{MAX_LABEL_FILE_BYTES} bytes"
            )
        labels[output.name] = split_labels(data.decode("utf-8", errors="replace"))
    return labels
