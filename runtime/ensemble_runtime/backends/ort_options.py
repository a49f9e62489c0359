"""ONNX Runtime's thread pools for a model's session: Triton's onnxruntime-backend parameters
(`intra_op_thread_count`, `inter_op_thread_count`, `execution_mode`, each a `string_value` in the config's
`parameters`), and otherwise pool sizes from the CPUs this process may run on. Pure: no session is made here.

Where Triton passes 0 (or an absent count) to ONNX Runtime, whose default counts the machine's cores and pins a
thread to each, here 0 means the runtime's own choice: one thread per instance where several share the session,
else one per CPU the process may use, none pinned."""

from __future__ import annotations

from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.model_config import ConfigError

INTRA_OP = "intra_op_thread_count"
INTER_OP = "inter_op_thread_count"
EXECUTION_MODE = "execution_mode"
MAX_THREADS = 1024  # more than any machine this serves on; a larger count is a mistake, refused


@dataclass(frozen=True, slots=True)
class ThreadOptions:
    intra_op: int  # threads running one operator, the calling thread included
    inter_op: int  # threads running operators side by side (parallel execution only)
    parallel: bool  # execution_mode 1: independent operators side by side


def _parameter(config: mc.ModelConfig, key: str) -> str:
    return config.parameters[key].string_value.strip() if key in config.parameters else ""


def _count(config: mc.ModelConfig, key: str) -> int:
    """A thread count parameter (0 when absent), or a clear error for anything but 0..MAX_THREADS."""
    text = _parameter(config, key)
    if not text:
        return 0
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(MAX_THREADS)) or int(text) > MAX_THREADS:
        raise ConfigError(
            f"model '{config.name}': parameter '{key}' must be a whole number from 0 to {MAX_THREADS}, "
            f"got '{text[:32]}'"
        )
    return int(text)


def usable_cpus(affinity: int, limit: int) -> int:
    """CPUs to size the pools for: those the process may run on (`affinity`), at most `limit` where one is set
    (a container's CPU limit: its quota, which affinity does not show); never fewer than one."""
    return max(1, min(affinity, limit) if limit > 0 else affinity)


def thread_options(config: mc.ModelConfig, instances: int, cpus: int) -> ThreadOptions:
    """The pools for a session `instances` instances share, in a process that may run on `cpus` CPUs."""
    share = 1 if instances > 1 else max(1, cpus)
    mode = _parameter(config, EXECUTION_MODE)
    if mode not in ("", "0", "1"):
        raise ConfigError(
            f"model '{config.name}': parameter '{EXECUTION_MODE}' must be 0 (sequential) or 1 (parallel), "
            f"got '{mode[:32]}'"
        )
    return ThreadOptions(_count(config, INTRA_OP) or share, _count(config, INTER_OP) or share, mode == "1")
