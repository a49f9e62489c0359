"""The Prometheus text exposition format (0.0.4), written as Triton writes it.

prometheus_client's `generate_latest` renames every counter `<name>_total` (OpenMetrics' convention); Triton's
families keep their names (`nv_inference_count`), and the dashboards, alerts and scripts written against Triton
look for those. Here each family's HELP and TYPE lines carry its own name and each sample is written under the
name it was added with; whole numbers are written without a fraction (`5`, not `5.0`), as prometheus-cpp does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from prometheus_client.core import Metric

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def render(families: Iterable[Metric]) -> bytes:
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {_escape_help(family.documentation)}\n")
        lines.append(f"# TYPE {family.name} {family.type}\n")
        for sample in family.samples:
            labels = ",".join(f'{key}="{_escape_label(value)}"' for key, value in sample.labels.items())
            lines.append(f"{sample.name}{{{labels}}} {value_text(sample.value)}\n" if labels
                         else f"{sample.name} {value_text(sample.value)}\n")
    return "".join(lines).encode()


def value_text(value: float) -> str:
    """A sample's value: whole numbers without a fraction, NaN and infinities as Prometheus spells them."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
