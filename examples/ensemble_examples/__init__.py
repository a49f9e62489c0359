"""Example model repositories for ensemble_runtime (and Triton), generated locally with no downloads.

`python -m ensemble_examples DIR` writes the repository; `python -m ensemble_examples.client --url HOST:PORT`
exercises it over gRPC.
"""

from ensemble_examples.repository import build_repository, model_names, write_image_png

__all__ = ["build_repository", "model_names", "write_image_png"]
