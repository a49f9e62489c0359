"""Backends: ONNX Runtime, Python (Triton-compatible), TensorRT."""
