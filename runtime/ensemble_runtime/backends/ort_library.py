"""Where the installed onnxruntime keeps its C library: what the native core's ONNX lane loads (`OnnxLane.serve`)."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort


def onnxruntime_library() -> Path | None:
    """The onnxruntime wheel's own `capi/libonnxruntime.so.<version>` (the version Python's onnxruntime is), or
    None where this build ships none (the lane is then not available)."""
    capi = Path(ort.__file__).parent / "capi"
    exact = capi / f"libonnxruntime.so.{ort.__version__}"
    if exact.is_file():
        return exact
    found = sorted(capi.glob("libonnxruntime.so*"))
    return found[-1] if found else None
