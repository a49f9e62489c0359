"""Triton's Python backend in process: `model.py` files and the `triton_python_backend_utils` API."""

from ensemble_runtime.backends.python.backend import PythonBackend

__all__ = ["PythonBackend"]
