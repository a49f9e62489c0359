"""Triton's Python backend, in process: `model.py` with `TritonPythonModel`, and `triton_python_backend_utils`."""

from ensemble_runtime.backends.python.backend import PythonBackend

__all__ = ["PythonBackend"]
