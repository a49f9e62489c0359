"""ONNX Runtime's thread pools from a model's config and the CPUs the process may use (`ort_options`)."""

from __future__ import annotations

import pytest
from ensemble_runtime.backends.ort_options import ThreadOptions, thread_options, usable_cpus
from ensemble_runtime.config.model_config import ConfigError
from ensemble_runtime.settings import parse_settings
from tritonclient.grpc import model_config_pb2 as mc


def _config(**parameters: str) -> mc.ModelConfig:
    config = mc.ModelConfig(name="m")
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    return config


def test_one_instance_gets_a_thread_per_cpu_the_process_may_use() -> None:
    assert thread_options(_config(), 1, 1) == ThreadOptions(1, 1, False)  # pinned to one CPU: no pool threads
    assert thread_options(_config(), 1, 6) == ThreadOptions(6, 6, False)
    assert thread_options(_config(), 1, 0) == ThreadOptions(1, 1, False)  # never 0, ONNX Runtime's default


def test_instances_side_by_side_get_one_thread_each() -> None:
    assert thread_options(_config(), 2, 6) == ThreadOptions(1, 1, False)


def test_tritons_parameters_set_the_pools_and_parallel_execution() -> None:
    config = _config(intra_op_thread_count="3", inter_op_thread_count=" 2 ", execution_mode="1")
    assert thread_options(config, 4, 1) == ThreadOptions(3, 2, True)
    assert thread_options(_config(intra_op_thread_count="0", execution_mode="0"), 1, 2) == ThreadOptions(2, 2, False)


@pytest.mark.parametrize(
    ("key", "value"),
    [("intra_op_thread_count", "-1"), ("intra_op_thread_count", "2.5"), ("inter_op_thread_count", "1025"),
     ("inter_op_thread_count", "\u00b2"), ("intra_op_thread_count", "9" * 5000), ("execution_mode", "parallel")],
)
def test_anything_else_is_refused_by_name(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"model 'm': parameter '{key}' must be"):
        thread_options(_config(**{key: value}), 1, 1)


def test_pools_are_sized_for_the_cpu_limit_where_one_is_set() -> None:
    assert usable_cpus(8, 0) == 8  # no limit: the CPUs the process may run on
    assert usable_cpus(8, 2) == 2  # a container limited to 2 CPUs on an 8-CPU node
    assert usable_cpus(2, 16) == 2  # a limit above the CPU set changes nothing
    assert usable_cpus(0, 0) == 1


def test_the_cpus_flag() -> None:
    assert parse_settings([]).cpus == 0
    assert parse_settings(["--cpus", "3"]).cpus == 3
    for bad in ("-1", "two", "$(ENSEMBLE_CPU_LIMIT)"):  # the last: a variable Kubernetes did not expand
        with pytest.raises(SystemExit):
            parse_settings(["--cpus", bad])
