"""The KServe v2 / Triton HTTP REST transport on aiohttp: parse, call the data plane (or, for the repository
routes, the repository plane), encode. Nothing else.

Bodies are handled by `http_codec`; statuses come from `status_codes`. Errors are `{"error": "<message>"}`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from ensemble_runtime.dataplane import HTTP_ENDPOINT, DataPlane
from ensemble_runtime.errors import ErrorCode, InferenceError, bounded, invalid
from ensemble_runtime.inference import InferRequest, InferResponse
from ensemble_runtime.log_settings import LogControl
from ensemble_runtime.protocol import http_codec as codec
from ensemble_runtime.protocol import http_documents as documents
from ensemble_runtime.protocol import shared_memory_api, status_codes
from ensemble_runtime.protocol._native import answer_coding
from ensemble_runtime.protocol.http_body import BodyRefused, Limit, read_body, too_large
from ensemble_runtime.protocol.http_generate import (
    ONE_RESPONSE,
    SSE_CONTENT,
    decode_generate,
    encode_generate,
)
from ensemble_runtime.protocol.offload import response_size, sized
from ensemble_runtime.protocol.restricted import http_restriction_middleware
from ensemble_runtime.protocol.server_header import product_only
from ensemble_runtime.repository_plane import RepositoryPlane
from ensemble_runtime.responses import StreamResponse
from ensemble_runtime.restrictions import Category, Restrictions
from ensemble_runtime.shared_memory import SharedMemoryRegistry

log = logging.getLogger(__name__)

_MODEL = "/v2/models/{model}"
_VERSION = "/v2/models/{model}/versions/{version}"
DEFAULT_MAX_JSON_BYTES = 8 * 1024 * 1024


def _json(obj: object, status: int = status_codes.HTTP_OK) -> web.Response:
    return web.Response(body=codec.dumps(obj), status=status, content_type=codec.JSON_CONTENT)


def _error(status: int, message: str) -> web.Response:
    return web.Response(body=codec.error_body(bounded(message)), status=status, content_type=codec.JSON_CONTENT)


def _status(ok: bool) -> web.Response:
    """Health and readiness: an empty 200, or an empty 400 as Triton answers."""
    return web.Response(status=status_codes.HTTP_OK if ok else status_codes.HTTP_BAD_REQUEST)


def _error_middleware(max_body_bytes: int) -> Middleware:
    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except InferenceError as exc:
            return _error(status_codes.http_status(exc.code), exc.message)
        except BodyRefused as exc:  # the rest of the body may be unread (or huge): do not keep the connection
            response = _error(exc.status, exc.message)
            response.force_close()
            return response
        except web.HTTPRequestEntityTooLarge:
            return _error(
                status_codes.HTTP_PAYLOAD_TOO_LARGE,
                f"request body exceeds the limit of {max_body_bytes} bytes",
            )
        except web.HTTPException as exc:
            if exc.status < status_codes.HTTP_BAD_REQUEST:
                raise
            return _error(exc.status, exc.reason)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("unexpected error in HTTP handler for %s %s", request.method, request.path)
            return _error(status_codes.HTTP_INTERNAL, f"internal error: {type(exc).__name__}: {exc}")

    return errors


def body_limits(max_body_bytes: int, max_json_bytes: int) -> tuple[Limit, Limit]:
    """(the limit of any body, that of a body or header that is JSON)."""
    body = Limit(max_body_bytes)
    if max_json_bytes >= max_body_bytes:
        return body, body
    hint = "send large tensors as binary data (the binary tensor extension), or raise --http-max-json-bytes"
    return body, Limit(max_json_bytes, "JSON in a request body", hint)


class _Routes:
    def __init__(
        self, dataplane: DataPlane, repository: RepositoryPlane, max_body_bytes: int, max_json_bytes: int,
        logs: LogControl | None = None,
    ) -> None:
        self._dp = dataplane
        self._repo = repository
        self._logs = logs  # the logging extension (None: not served here)
        self._body, self._json = body_limits(max_body_bytes, max_json_bytes)

    async def _json_body(self, request: web.Request) -> bytearray:
        """A body that is all JSON (control requests, and inference without binary tensors)."""
        return await read_body(request, self._json)

    read_json = _json_body

    @property
    def shared_memory(self) -> SharedMemoryRegistry:
        return self._dp.shared_memory

    # ---- health and metadata ----------------------------------------------------------------------
    async def live(self, request: web.Request) -> web.Response:
        return _status(self._dp.live())

    async def ready(self, request: web.Request) -> web.Response:
        return _status(self._dp.ready())

    async def server_metadata(self, request: web.Request) -> web.Response:
        name, version, extensions = self._dp.server_metadata()
        return _json({"name": name, "version": version, "extensions": list(extensions)})

    async def model_ready(self, request: web.Request) -> web.Response:
        model, version = _target(request)
        return _status(self._dp.model_ready(model, version))

    # ---- logging extension --------------------------------------------------------------------------
    async def log_settings(self, request: web.Request) -> web.Response:
        """GET: the log settings; POST: the body's changes applied (all or none), then the settings."""
        if self._logs is None:
            raise InferenceError(ErrorCode.UNIMPLEMENTED, "the logging extension is not served here")
        if request.method == "POST":
            self._logs.update(codec.parse_json(await self._json_body(request), "the log settings request"))
        return _json(self._logs.settings.as_dict())

    # ---- trace extension ----------------------------------------------------------------------------
    async def trace_settings(self, request: web.Request) -> web.Response:
        """GET: the trace settings (global, or the model's); POST: the body's changes applied (all or none)."""
        model = request.match_info.get("model", "")
        changes = None
        if request.method == "POST":
            changes = codec.parse_json(await self._json_body(request), "the trace settings request")
        return _json(self._dp.trace_settings(model, changes).as_dict())

    async def model_metadata(self, request: web.Request) -> web.Response:
        model, version = _target(request)
        lv = self._dp.model_version(model, version)
        served = self._dp.registry.records[model].served
        return _json(documents.model_metadata(self._dp.signature(lv), lv.config, served))

    async def model_config(self, request: web.Request) -> web.Response:
        model, version = _target(request)
        return _json(documents.model_config_json(self._dp.model_config(model, version)))

    async def statistics(self, request: web.Request) -> web.Response:
        model, version = request.match_info.get("model", ""), request.match_info.get("version", "")
        versions = self._dp.statistics(model, version)
        return _json(documents.model_statistics((lv.model, lv.version, lv.stats) for lv in versions))

    async def ensemble_versions(self, request: web.Request) -> web.Response:
        model = request.match_info["model"]
        return _json({"ensemble": model, "versions": self._dp.served_versions(model)})

    async def storage_status(self, request: web.Request) -> web.Response:
        return _json(self._repo.storage_status().model_dump(mode="json"))

    # ---- inference ----------------------------------------------------------------------------------
    async def infer(self, request: web.Request) -> web.Response:
        model, version = _target(request)
        header_length = request.headers.get(codec.HEADER_LENGTH)
        if header_length is None:
            body = await self._json_body(request)
        else:
            if header_length.strip().isdigit() and int(header_length) > self._json.size:
                raise too_large(self._json)
            body = await read_body(request, self._body)
        shm = self._dp.shared_memory
        decoded = await sized(len(body), codec.decode_infer_request, body, header_length, model, version, shm)
        response = await self._dp.infer(decoded.request, decoded.declared, HTTP_ENDPOINT)
        size = response_size(response)
        payload, header_length_out = await sized(size, codec.encode_infer_response, response, decoded, shm)
        if header_length_out is None:
            out = web.Response(body=payload, content_type=codec.JSON_CONTENT)
        else:
            out = web.Response(
                body=payload,
                content_type=codec.BINARY_CONTENT,
                headers={codec.HEADER_LENGTH: str(header_length_out)},
            )
        coding = answer_coding(",".join(request.headers.getall("Accept-Encoding", [])))
        if coding is not None:  # the native core's rule: the client's preferred coding, none weighted q=0
            out.enable_compression(force=web.ContentCoding(coding))
        return out

    # ---- Triton's generate extension (http_generate) ------------------------------------------------------
    async def _generate_request(self, request: web.Request) -> tuple[InferRequest, dict[str, str]]:
        """The model first (an unknown one is a 404 whatever the body, as in Triton), then the body, decoded in a
        thread when large (`sized`), as an infer request's."""
        model, version = _target(request)
        raw = await self._json_body(request)
        sig = self._dp.signature(self._dp.registry.find(model, version))
        return await sized(len(raw), decode_generate, raw, sig, model, version)

    async def _responses(self, request: web.Request) -> AsyncGenerator[StreamResponse, None]:
        return self._dp.infer_stream(*await self._generate_request(request))

    async def generate(self, request: web.Request) -> web.Response:
        """Exactly one response, as JSON; a decoupled model that sends none or several is refused (from its
        second response on, which stops the request)."""
        answer: InferResponse | None = None
        async with contextlib.aclosing(await self._responses(request)) as responses:
            async for item in responses:
                if item.error is not None:
                    raise item.error
                if item.response is not None:
                    if answer is not None:
                        raise invalid(ONE_RESPONSE)
                    answer = item.response
        if answer is None:
            raise invalid(ONE_RESPONSE)
        body = await sized(response_size(answer), encode_generate, answer)
        return web.Response(body=body, content_type=codec.JSON_CONTENT)

    async def generate_stream(self, request: web.Request) -> web.StreamResponse:
        """Every response as a server-sent event (`data: {...}`), written as the model sends it. The status is
        the first response's: an error before it is a JSON error as from any route; one after it is an event."""
        async with contextlib.aclosing(await self._responses(request)) as responses:
            first = await anext(responses, None)
            while first is not None and first.response is None and first.error is None:  # the final flag alone
                first = await anext(responses, None)
            status = status_codes.HTTP_OK
            if first is not None and first.error is not None:
                status = status_codes.http_status(first.error.code)
            out = web.StreamResponse(status=status, headers={"Content-Type": SSE_CONTENT})
            try:
                await out.prepare(request)
                await _write_events(out, first, responses)
                await out.write_eof()
            except ConnectionResetError:  # the client went away: closing `responses` cancels the request's channel
                log.debug("generate_stream: the client of %s went away", request.path)
        return out

    # ---- repository ---------------------------------------------------------------------------------
    async def repository_index(self, request: web.Request) -> web.Response:
        ready_only = documents.index_ready_only(bytes(await self._json_body(request)))
        return _json(documents.repository_index(self._repo.repository_index(ready_only)))

    async def load(self, request: web.Request) -> web.Response:
        self._repo.require_repository_control()
        model = request.match_info["model"]
        override = documents.load_config_override(bytes(await self._json_body(request)), model)
        await self._repo.load(model, override)
        return web.Response(status=status_codes.HTTP_OK)

    async def unload(self, request: web.Request) -> web.Response:
        self._repo.require_repository_control()
        model = request.match_info["model"]
        codec.parse_json(await self._json_body(request), f"the unload request for '{model}'")
        await self._repo.unload(model)
        return web.Response(status=status_codes.HTTP_OK)


async def _write_events(
    out: web.StreamResponse, item: StreamResponse | None, responses: AsyncGenerator[StreamResponse, None]
) -> None:
    """`item` and every response after it as events; an error after the first response is an event too."""
    while item is not None:
        try:
            if item.error is not None:
                await out.write(_event(codec.error_body(bounded(item.error.message))))
            elif item.response is not None:
                answer = item.response
                await out.write(_event(await sized(response_size(answer), encode_generate, answer)))
            item = await anext(responses, None)
        except InferenceError as exc:  # an output JSON cannot carry, or the request failed later on
            await out.write(_event(codec.error_body(bounded(exc.message))))
            return


def _event(json_body: bytes) -> bytes:
    """One server-sent event (the JSON is on one line: `dumps` escapes every line break)."""
    return b"data: " + json_body + b"\n\n"


def _target(request: web.Request) -> tuple[str, str]:
    return request.match_info["model"], request.match_info.get("version", "")


def _routes(r: _Routes) -> list[tuple[str, str, Handler, Category]]:
    """(method, path, handler, Triton's category for --http-restricted-api) of every route. Our own routes:
    the storage status and an ensemble's served version set describe what the repository holds and serves
    (the operator reads them next to the index), so they are `model-repository`."""
    routes: list[tuple[str, str, Handler, Category]] = [
        ("GET", "/v2/health/live", r.live, Category.HEALTH),
        ("GET", "/v2/health/ready", r.ready, Category.HEALTH),
        ("GET", "/v2", r.server_metadata, Category.METADATA),
        ("GET", "/v2/models/stats", r.statistics, Category.STATISTICS),
        ("GET", "/v2/logging", r.log_settings, Category.LOGGING),
        ("POST", "/v2/logging", r.log_settings, Category.LOGGING),
        ("GET", "/v2/trace/setting", r.trace_settings, Category.TRACE),
        ("POST", "/v2/trace/setting", r.trace_settings, Category.TRACE),
        ("GET", "/v2/models/{model}/trace/setting", r.trace_settings, Category.TRACE),
        ("POST", "/v2/models/{model}/trace/setting", r.trace_settings, Category.TRACE),
    ]
    for base in (_MODEL, _VERSION):
        routes += [
            ("GET", base, r.model_metadata, Category.METADATA),
            ("GET", f"{base}/ready", r.model_ready, Category.HEALTH),
            ("GET", f"{base}/config", r.model_config, Category.MODEL_CONFIG),
            ("GET", f"{base}/stats", r.statistics, Category.STATISTICS),
            ("POST", f"{base}/infer", r.infer, Category.INFERENCE),
            ("POST", f"{base}/generate", r.generate, Category.INFERENCE),
            ("POST", f"{base}/generate_stream", r.generate_stream, Category.INFERENCE),
        ]
    routes += [
        ("POST", "/v2/repository/index", r.repository_index, Category.MODEL_REPOSITORY),
        ("POST", "/v2/repository/models/{model}/load", r.load, Category.MODEL_REPOSITORY),
        ("POST", "/v2/repository/models/{model}/unload", r.unload, Category.MODEL_REPOSITORY),
        ("GET", "/v2/ensembles/{model}/versions", r.ensemble_versions, Category.MODEL_REPOSITORY),
        ("GET", "/v2/repository/status", r.storage_status, Category.MODEL_REPOSITORY),
    ]
    routes += shared_memory_api.http_routes(r.shared_memory, r.read_json)
    return routes


def build_http_app(
    dataplane: DataPlane,
    repository: RepositoryPlane,
    max_body_bytes: int,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    restrictions: Restrictions | None = None,
    logs: LogControl | None = None,
) -> web.Application:
    """The v2 REST API over `dataplane` and `repository`; bodies over `max_body_bytes` (all-JSON ones:
    `max_json_bytes`) get a JSON 413, by their Content-Length before they are read, or as soon as reading (and
    inflating) passes it;
    `restrictions`: the categories that need a header (--http-restricted-api), refused with a 403 before the
    body is read.

    aiohttp's own inflation of compressed bodies is off: it has no limit; `http_body` inflates within one."""
    routes = _routes(_Routes(dataplane, repository, max_body_bytes, max_json_bytes, logs))
    middlewares = [_error_middleware(max_body_bytes)]
    if restrictions is not None and restrictions.by_category:
        categories = {path: category for _, path, _, category in routes}
        middlewares.append(http_restriction_middleware(restrictions, categories))
    app = web.Application(
        client_max_size=max_body_bytes, middlewares=middlewares, handler_args={"auto_decompress": False}
    )
    for method, path, handler, _ in routes:
        if method == "GET":
            app.router.add_get(path, handler)
        else:
            app.router.add_route(method, path, handler)
    return product_only(app)


async def start_http(app: web.Application, host: str, port: int, access_log: bool = False) -> web.AppRunner:
    """Serve `app` on host:port (port 0: a free one, see `runner.addresses`); `runner.cleanup()` stops it."""
    return await _start(app, access_log, lambda runner: web.TCPSite(runner, host, port))


async def start_http_unix(app: web.Application, path: str) -> web.AppRunner:
    """Serve `app` on the Unix socket `path` (for the native core, which forwards to it)."""
    return await _start(app, False, lambda runner: web.UnixSite(runner, path))


async def _start(app: web.Application, access_log: bool, site_of: Callable[[web.AppRunner], web.BaseSite]) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=log if access_log else None)
    await runner.setup()
    site = site_of(runner)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner
