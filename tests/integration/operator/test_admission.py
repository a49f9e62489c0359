"""Invalid Ensembles meet the real admission webhook (the API server calls the operator's webhook
server by URL, trusting the chart's CA), and the reconcile reports them when the webhook is not there."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import yaml

from tests.infra.controlplane import ControlPlane
from tests.support.ports import free_port

from .support import (
    CHART,
    JSON,
    RELEASE,
    RELEASE_NAMESPACE,
    OperatorProcess,
    Release,
    condition,
    ensemble,
    get,
    gpu_ensemble,
    helm_values_file,
    namespace_with,
    phase_is,
    wait_ensemble,
    wait_for,
)

pytestmark = pytest.mark.controlplane

DENIED = 'admission webhook "validate-ensemble.serving.ensemble.dev" denied the request'


def _cycle(spec: JSON) -> None:
    spec["steps"][0]["inputMap"] = {"IMAGE": "score"}
    spec["steps"][2]["outputMap"] = {"LABEL": "LABEL", "SCORE": "score"}
    spec["outputs"] = spec["outputs"][:1]


def _unknown_tensor(spec: JSON) -> None:
    spec["steps"][1]["inputMap"] = {"input": "pixelz"}


def _missing_model(spec: JSON) -> None:
    spec["steps"][1]["modelRef"] = {"name": "nope"}


def _dtype_mismatch(spec: JSON) -> None:
    spec["inputs"][0]["dataType"] = "FP32"


CASES: dict[str, tuple[Callable[[JSON], None], tuple[str, ...]]] = {
    # the runtime's own words (ensemble_contract.graph): what the webhook refuses is what the runtime would
    "cycle": (
        _cycle,
        ("steps form a cycle: step 'preprocess' -> step 'classify' -> step 'postprocess' -> step 'preprocess'",),
    ),
    "unknown tensor": (
        _unknown_tensor,
        ("step 'classify' input 'input' reads ensemble tensor 'pixelz'", "neither an ensemble input nor any step"),
    ),
    "dtype mismatch": (
        _dtype_mismatch,
        (
            "ensemble tensor 'IMAGE': data type mismatch",
            "ensemble input 'IMAGE' produces TYPE_FP32 but step 'preprocess' input 'IMAGE' expects TYPE_UINT8",
        ),
    ),
}


def broken(name: str, case: str) -> JSON:
    doc = gpu_ensemble(name)
    CASES.get(case, (_missing_model, ()))[0](doc["spec"])
    return doc


def kubectl_apply(cp: ControlPlane, ns: str, doc: JSON, *extra: str) -> tuple[int, str]:
    proc = cp.kubectl("apply", "-n", ns, "-f", "-", *extra, input=yaml.safe_dump(doc), check=False)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def models_ns(audited_control_plane: ControlPlane, operator: OperatorProcess) -> str:
    return namespace_with(audited_control_plane, "admission")


@pytest.mark.parametrize("case", sorted(CASES))
def test_webhook_refuses_invalid_ensembles(audited_control_plane: ControlPlane, models_ns: str, case: str) -> None:
    cp = audited_control_plane
    name = case.replace(" ", "-")
    code, output = kubectl_apply(cp, models_ns, broken(name, case))
    assert code != 0, output
    assert DENIED in output
    for fragment in CASES[case][1]:
        assert fragment in output
    assert ensemble(cp, models_ns, name) is None


def test_a_missing_model_is_refused(audited_control_plane: ControlPlane, models_ns: str) -> None:
    """A step naming a Model that does not exist is refused at apply time (Models are applied first)."""
    cp = audited_control_plane
    name = "missing-model"
    code, output = kubectl_apply(cp, models_ns, broken(name, "missing model"))
    assert code != 0, output
    assert DENIED in output
    assert "step 'classify' references Model 'nope', which does not exist in this namespace" in output
    assert ensemble(cp, models_ns, name) is None


def test_webhook_accepts_the_example(audited_control_plane: ControlPlane, models_ns: str) -> None:
    code, output = kubectl_apply(audited_control_plane, models_ns, gpu_ensemble("fine"), "--dry-run=server")
    assert code == 0, output


@pytest.fixture
def webhook_unreachable(audited_control_plane: ControlPlane, release: Release, models_ns: str) -> Iterator[None]:
    """The chart upgraded to call a port nobody listens on, with failurePolicy Ignore; restored after."""
    cp = audited_control_plane
    workdir = release.kubeconfig.parent

    def upgrade(values: JSON) -> None:
        cp.helm("upgrade", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, "-f", str(helm_values_file(workdir, values)))

    def refused() -> bool:
        return kubectl_apply(cp, models_ns, broken("probe", "cycle"), "--dry-run=server")[0] != 0

    upgrade(Release.values(free_port(), failurePolicy="Ignore"))
    wait_for(lambda: not refused(), "the API server to stop calling the webhook", timeout=30)
    try:
        yield
    finally:
        upgrade(Release.values(release.webhook_port))
        wait_for(refused, "the webhook to be called again", timeout=30)


def test_without_the_webhook_the_reconcile_reports_the_invalid_spec(
    audited_control_plane: ControlPlane, models_ns: str, webhook_unreachable: None
) -> None:
    cp = audited_control_plane
    name = "slipped-through"
    code, output = kubectl_apply(cp, models_ns, broken(name, "cycle"))
    assert code == 0, output
    ens = wait_ensemble(cp, models_ns, name, phase_is("Invalid"), "phase Invalid")
    degraded = condition(ens, "Degraded")
    assert degraded is not None and degraded["status"] == "True" and degraded["reason"] == "InvalidSpec"
    assert CASES["cycle"][1][0] in degraded["message"]
    ready = condition(ens, "Ready")
    assert ready is not None and ready["status"] == "False"
    # An invalid spec plans no objects at all.
    assert get(cp, f"/apis/apps/v1/namespaces/{models_ns}/deployments/{name}") is None

    def warned() -> bool:  # the operator writes the status first, then the event: a later API call of its own
        events = cp.api("GET", f"/api/v1/namespaces/{models_ns}/events?fieldSelector=involvedObject.name%3D{name}")
        return any(e["type"] == "Warning" and e["reason"] == "Invalid" for e in events["items"])

    wait_for(warned, "a Warning event with reason Invalid", timeout=30)
