"""GPUs as this process sees them: visible devices, free memory (NVML), instance placement, CUDA runtime calls.

Nothing here imports an NVIDIA package at import time; without one, every function answers "no GPU" with a reason.
"""
