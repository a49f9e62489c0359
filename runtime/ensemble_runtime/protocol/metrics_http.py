"""The Prometheus endpoint on its own port."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CollectorRegistry

from ensemble_runtime.metrics_text import CONTENT_TYPE, render
from ensemble_runtime.protocol.server_header import product_only


def build_metrics_app(registry: CollectorRegistry) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=render(registry.collect()), headers={"Content-Type": CONTENT_TYPE})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return product_only(app)
