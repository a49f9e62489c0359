"""Composition root: settings -> Kubernetes client -> reconciler -> handlers -> kopf.run."""

from __future__ import annotations

import faulthandler
import logging
import random
from typing import Any

import kopf

from .handlers import register
from .kube_api import connect
from .reconcile import Reconciler
from .settings import Settings
from .settle import ModelSettle
from .workers import RECONCILE_THREADS

INSTANT_EXIT_TIMEOUT_S = 2.0


def configure(settings: Settings, kopf_settings: kopf.OperatorSettings) -> None:
    """Apply our settings to kopf's: peering (one acting replica), webhook server."""
    kopf_settings.peering.mandatory = True
    kopf_settings.posting.level = logging.WARNING
    # Our CRDs are installed with the chart: no watching of CustomResourceDefinitions (which would need
    # cluster-wide RBAC on them even for a namespaced install).
    kopf_settings.scanning.disabled = True
    # A deleted object's daemon (its worker) exits as soon as kopf signals it, but in more event-loop cycles
    # than kopf's default "instant exit" allows (10 zero-time cycles); kopf then re-checks after the
    # daemon's cancellation backoff, and the finalizer stays that long: 10 s per Model, 40 s for a namespace.
    # Waiting up to this long for the exit lets the deletion go on in the same cycle.
    kopf_settings.background.instant_exit_timeout = INSTANT_EXIT_TIMEOUT_S
    if settings.webhook_enabled:
        kopf_settings.admission.server = kopf.WebhookServer(
            addr=settings.webhook_addr,
            port=settings.webhook_port,
            host=settings.webhook_host,
            certfile=settings.webhook_cert_path,
            pkeyfile=settings.webhook_key_path,
        )
        kopf_settings.admission.managed = None  # the Helm chart owns the ValidatingWebhookConfiguration


def main() -> None:
    faulthandler.enable()  # a crash in native code (protobuf, the TLS stack) leaves its Python stacks in the log
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    kube = connect(settings.pod_http_timeout_seconds, settings.control_key.get_secret_value(), RECONCILE_THREADS)
    reconciler = Reconciler(
        kube=kube, defaults=settings.runtime_defaults(), settle=ModelSettle(settings.model_settle_seconds)
    )
    registry = kopf.OperatorRegistry()
    register(
        registry,
        reconciler,
        settings.status_interval_seconds,
        resync_interval=settings.resync_interval_seconds,
        webhooks=settings.webhook_enabled,
        policy=settings.runtime_policy(),
    )

    # A registry of our own lacks the default registry's login fallbacks: log in as kube_api.connect does,
    # through the official client (in-cluster ServiceAccount, else the kubeconfig).
    @kopf.on.login(registry=registry)
    def _login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    @kopf.on.startup(registry=registry)
    def _startup(settings: kopf.OperatorSettings, **_: object) -> None:
        configure(ours, settings)

    ours = settings
    # Replicas with equal priority would all pause; a random one makes exactly one of them act.
    priority = (
        settings.peering_priority if settings.peering_priority is not None else random.randint(1, 2**30)
    )
    kopf.run(
        registry=registry,
        namespaces=settings.namespace_list(),
        clusterwide=settings.clusterwide,
        liveness_endpoint=settings.liveness_endpoint,
        standalone=False,
        peering_name=settings.peering_name,
        priority=priority,
    )


if __name__ == "__main__":
    main()
