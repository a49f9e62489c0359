"""`import triton_python_backend_utils as pb_utils` for Triton `model.py` files run by ensemble_runtime.

The names, and their list, are the package's own (`ensemble_runtime.backends.python.pb_utils.__all__`).
"""

from ensemble_runtime.backends.python.pb_utils import *  # noqa: F403
from ensemble_runtime.backends.python.pb_utils import __all__ as __all__
