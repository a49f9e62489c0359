"""The size of ONNX Runtime's intra-op pool: from the CPUs the process may use, never ONNX Runtime's own default."""

from __future__ import annotations

from ensemble_runtime.backends.onnxruntime_backend import intra_op_threads


def test_one_instance_gets_a_thread_per_cpu_the_process_may_use() -> None:
    assert intra_op_threads(1, 1) == 1  # pinned to one CPU: no pool threads at all
    assert intra_op_threads(1, 6) == 6


def test_instances_side_by_side_get_one_thread_each() -> None:
    assert intra_op_threads(2, 6) == 1
    assert intra_op_threads(4, 1) == 1


def test_never_the_default_even_without_a_cpu() -> None:
    assert intra_op_threads(1, 0) == 1  # 0 would be ONNX Runtime's default: every core, each pinned
