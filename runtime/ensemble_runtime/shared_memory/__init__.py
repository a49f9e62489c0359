"""Triton's system and CUDA shared memory extensions: registered regions, and tensors read from / written to them.

`regions` keeps the registry both transports use; `tensors` reads inputs from and writes outputs into regions
with Triton's checks and messages; `cuda_ipc` opens CUDA IPC handles through cuda-python. No grpc here.
"""

from ensemble_runtime.shared_memory.regions import Kind, Region, SharedMemoryRegistry, Window
from ensemble_runtime.shared_memory.tensors import (
    ShmRef,
    check_output,
    output_refs,
    parse_ref,
    read_input,
    sends_to_shared_memory,
    write_output,
)

__all__ = [
    "Kind", "Region", "SharedMemoryRegistry", "ShmRef", "Window", "check_output", "output_refs", "parse_ref", "read_input",
    "sends_to_shared_memory", "write_output",
]
