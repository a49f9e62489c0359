"""The real stack's pure parts: the scenario documents fitted to the node, and the chart values for the
built images (rendered by the real `helm template` against the chart's schema)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from ensemble_examples.manifests import SCENARIOS, scenario_documents

from e2e.real_stack import RUNTIME_CPU_REQUEST, chart_values, fit_to_node
from tests.infra.images import ImageArtifact
from tests.infra.tools import ToolLocator, require
from tests.integration.operator.support import CHART, RELEASE, RELEASE_NAMESPACE

RUNTIME = ImageArtifact("runtime-cpu", "k1", Path("/x/r.tar"), "localhost/ensemble-runtime:k1")
OPERATOR = ImageArtifact("operator", "k2", Path("/x/o.tar"), "localhost/ensemble-operator:k2")


@pytest.mark.parametrize("folder", list(SCENARIOS))
def test_fit_to_node_sets_only_the_ensembles_cpu_request(folder: str) -> None:
    original = scenario_documents(folder)
    fitted = fit_to_node(original)
    assert fitted != original
    assert scenario_documents(folder) == original  # copies: the input is untouched
    for before, after in zip(original, fitted, strict=True):
        if before["kind"] != "Ensemble":
            assert after == before
            continue
        assert after["spec"]["resources"]["requests"]["cpu"] == RUNTIME_CPU_REQUEST
        after["spec"]["resources"]["requests"]["cpu"] = before["spec"]["resources"]["requests"]["cpu"]
        assert after == before  # memory requests and limits, GPUs, everything else as the manifest says


def test_chart_values_point_the_chart_at_the_built_images(tool_locator: ToolLocator, tmp_path: Path) -> None:
    require("helm", locator=tool_locator)
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(chart_values(RUNTIME, OPERATOR)))
    rendered = subprocess.run(
        [str(tool_locator.binary("helm")), "template", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, "-f", str(values)],
        capture_output=True,
        text=True,
        check=True,
        env={"HOME": str(tmp_path)},
    ).stdout
    deployment = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == OPERATOR.reference
    assert container["imagePullPolicy"] == "IfNotPresent"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["ENSEMBLE_OPERATOR_DEFAULT_RUNTIME_IMAGE"] == RUNTIME.reference
    assert env["ENSEMBLE_OPERATOR_DEFAULT_RUNTIME_IMAGE_PULL_POLICY"] == "IfNotPresent"
    # The chart's own hardening is kept: nothing in the values overrides it.
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert "readinessProbe" in container and container["resources"]["limits"]["memory"]
