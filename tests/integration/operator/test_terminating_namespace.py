"""A namespace being deleted refuses every new object, Events too: the operator's event writer drops them on the
real API server instead of failing the reconcile or the deletion handler that reports them."""

from __future__ import annotations

import pytest

from tests.infra.controlplane import ControlPlane

from .support import new_namespace

pytestmark = pytest.mark.controlplane

HOLD = "test.ensemble.dev/hold"


def test_an_event_in_a_namespace_being_deleted_is_dropped_not_raised(audited_control_plane: ControlPlane) -> None:
    from ensemble_operator.kube import KubeClient
    from ensemble_operator.kube_api import ApiClientTransport
    from kubernetes import config as kube_config

    cp = audited_control_plane
    ns = new_namespace(cp, "terminating")
    path = f"/api/v1/namespaces/{ns}/configmaps/hold"
    # A finalizer no controller removes keeps the namespace Terminating until this test lets it go.
    cp.api("POST", f"/api/v1/namespaces/{ns}/configmaps",
           {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hold", "finalizers": [HOLD]}})
    cp.api("DELETE", f"/api/v1/namespaces/{ns}")
    try:
        client = kube_config.new_client_from_config(str(cp.kubeconfig_path))  # type: ignore[no-untyped-call]
        kube = KubeClient(ApiClientTransport(client))
        held = cp.api("GET", path)
        kube.emit_event({**held, "apiVersion": "v1", "kind": "ConfigMap"}, "Test", "a namespace being deleted")
        assert (kube.stats.events, kube.stats.events_dropped) == (0, 1)
    finally:
        held = cp.api("GET", path)
        held["metadata"]["finalizers"] = []
        cp.api("PUT", path, held)
