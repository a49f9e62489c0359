"""aiohttp names itself and its version, and Python's, in a `Server` header on every answer ("Python/3.11
aiohttp/3.14.5"): the first thing a peer looking for a known flaw would read. Our apps' answers name the product,
no versions; the native HTTP core's own answers carry no `Server` header at all."""

from __future__ import annotations

from aiohttp import hdrs, web

SERVER = "ensemble-runtime"


async def _product_only(_: web.Request, response: web.StreamResponse) -> None:
    response.headers[hdrs.SERVER] = SERVER  # aiohttp set its own before this signal; this replaces it


def product_only(app: web.Application) -> web.Application:
    """`app`, its answers' `Server` header the product's name alone."""
    app.on_response_prepare.append(_product_only)
    return app
