"""`interlingua serve`: the embedding endpoint on Ray Serve.

    POST /embed   {"sentences": ["Dieu est amour."], "lang": "fr"}
                  -> 200 {"embeddings": [[...]], "model_version": "3", "dim": 256}
                  with "nearest": {"k": 3, "in": ["en"]}: also the nearest stored sentences of each
    POST /translate {"sentences": ["Dieu est amour."], "lang": "fr", "target": "en", "beam": 4}
                  -> 200 {"translations": ["god is love."], "lang": "fr", "target": "en", "beam": 4, ...}
                  through the interlingua: the source's encoder, then the target's decoder
    GET  /healthz -> 200 while the replica runs;  GET /readyz -> 200 with the version once a model is loaded
    GET  /openapi.json, /docs -> the API's OpenAPI description, and its page (Swagger UI 5, served from the
                  fastapi-offline package: it renders with no network beyond the endpoint)

The routes are a FastAPI app, the deployment's ingress (`@serve.ingress`), as in Ray Serve's own examples; its
pydantic models (serve/schema.py) describe the bodies. /embed and /translate read their raw bodies themselves,
so that the checks stay `parse_embed`'s and `parse_translate`'s. Every error is {"error": "...", ...} with its
status. A body is read within its deadline, and slow bodies are capped per replica and per client, so slow
clients cannot starve fast ones (serve/body.py: 408, 429). Requests are checked against the `serve` limits
before any work, their cost in neighbours and in rows to decode too (serve/request.py: 413, 422 with a
message); concurrent /embed requests are embedded together (`@serve.batch`, grouped by language), each failure
kept to the request that caused it (serve/batch.py); a translation is decoded alone, in a thread, one at a time
per replica (the others wait their turn, within max_ongoing_requests), so that decoding never holds more than
one of the threads /embed's batches run in. Beyond
`max_ongoing_requests` per replica and `max_queued_requests` waiting, Ray Serve's proxy answers 503 at once,
so an overload costs no memory. With serve.model=champion each replica reads the alias every `poll_seconds`
and swaps to a newly promoted version without failing a request (serve/models.py);
every answer names the version that computed it (body and the X-Model-Version header).

Every listener of the endpoint is on the loopback address unless configured otherwise: Serve's HTTP proxy on
serve.host (127.0.0.1 by default), the replica's own gRPC server on the node's address (`bind_replica_grpc`),
which is 127.0.0.1 on the local Ray instance a command starts (`cluster.ensure_ray`).
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations in the replica, from methods that
# Ray Serve pickled by value with only the globals their code names, where a string "Request" would not resolve.
import asyncio
import importlib.resources
import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from ray import serve
from starlette.exceptions import HTTPException

from orchestration.adapters.lineage import project_version
from orchestration.config import Config, JSONValue
from orchestration.config.stages import ServeConfig
from orchestration.serve.batch import answer_batch, answer_translation
from orchestration.serve.body import SlowBodies, read_body
from orchestration.serve.models import ModelSlot, ModelSource, ServedModel, poll_champion
from orchestration.serve.request import EmbedRequest, RequestRejected, check_length, parse_embed, parse_translate
from orchestration.serve.schema import (
    ERRORS,
    EmbedBody,
    EmbedResponse,
    Health,
    Ready,
    TranslateBody,
    TranslateResponse,
    request_body,
)

log = logging.getLogger(f"ray.serve.{__name__}")  # Ray Serve shows its replicas' "ray.serve" loggers
DEPLOYMENT = "interlingua"
ROUTES = "POST /embed, /translate, GET /healthz, /readyz, /docs"


def node_address(address: str, node_ip: str) -> str:
    """A gRPC listening `address` ("[::]:0", "0.0.0.0:0": every interface) on `node_ip` alone; any other left
    as it is."""
    host, _, port = address.rpartition(":")
    if host not in ("[::]", "0.0.0.0", ""):
        return address
    return f"[{node_ip}]:{port}" if ":" in node_ip else f"{node_ip}:{port}"


def bind_replica_grpc() -> None:
    """Bind the replica's own gRPC server to the node's address instead of every interface
    (`ray_private.wrap_replica_grpc_port`: Ray Serve 2.60 has no option for it); its callers reach it at the
    node's address (`RunningReplicaInfo.node_ip`, `ray.util.get_node_ip_address()`), so that address alone
    loses nothing: 127.0.0.1 on the local instance a command starts, the host's own on a cluster. Called in the
    replica's process; tests/orchestration/serve/test_server.py checks the listeners of a running server."""
    import ray

    from orchestration.adapters.ray_private import wrap_replica_grpc_port

    node_ip = ray.util.get_node_ip_address()
    if not wrap_replica_grpc_port(lambda address: node_address(address, node_ip)):
        log.warning(
            "this Ray Serve has no replica.add_port_to_grpc_server: its replica's gRPC server may listen "
            "on every interface"
        )


# The app and the deployment come after every function their methods call: `serve.ingress` pickles the app,
# and with it the methods, as the class is decorated; a name the module defines later would be missing from
# them in the replica (NameError).
api = FastAPI(
    title="interlingua",
    version=project_version(),
    description="Language-independent sentence embeddings: POST sentences of one language to /embed, or to "
    "/translate with a target language to decode them into.",
    docs_url=None,  # FastAPI's own page loads Swagger UI from a CDN: /docs below serves a packaged copy
    redoc_url=None,
)
DOCS_ASSETS = "/docs/assets"
# Swagger UI 5 (it renders OpenAPI 3.1, what FastAPI writes; a 4.x cannot), as fastapi-offline packages it
api.mount(
    DOCS_ASSETS,
    StaticFiles(directory=str(importlib.resources.files("fastapi_offline") / "static")),
    name="docs-assets",
)


@api.get("/docs", include_in_schema=False)
async def docs_page() -> HTMLResponse:
    """Swagger UI over /openapi.json, its scripts and styles from this endpoint."""
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="interlingua: the HTTP API",
        swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png",
    )


@api.exception_handler(HTTPException)
async def _no_route(request: Request, exc: HTTPException) -> JSONResponse:
    """404 and 405 in the API's error form, with its routes."""
    what = "no route" if exc.status_code == 404 else f"{request.method} is not allowed on"
    return JSONResponse({"error": f"{what} {request.url.path}; {ROUTES}"}, exc.status_code, headers=exc.headers)


@serve.deployment(name=DEPLOYMENT)
@serve.ingress(api)
class EmbeddingServer:
    """One replica: a loaded model (`ModelSlot`), the batching queue and, for a champion, the alias poller."""

    def __init__(self, config: dict[str, JSONValue], scratch: str | None = None) -> None:
        from model.training import cpu_threads

        bind_replica_grpc()  # before Serve starts the replica's gRPC server, once this constructor returns
        self.config = Config.model_validate(config)
        self.limits = self.config.serve
        cpu_threads(max(1, int(self.limits.cpus_per_replica)))
        self.slow_bodies = SlowBodies(self.limits)
        self.decoding = asyncio.Semaphore(1)  # one /translate decodes at a time (a replica's CPUs are few)
        self.source = ModelSource(self.config, scratch=scratch)
        self.warned: set[str] = set()  # the champion versions refused (or swapped in though incompatible), said once
        self.slot = ModelSlot(
            self.source.load(self.source.current_version()), drain_timeout_s=self.limits.drain_timeout_s
        )
        # the setters `serve.batch` adds to the method it wraps (documented there); its typing keeps the method's own
        self.embed_batch.set_max_batch_size(self.limits.max_batch_size)  # type: ignore[attr-defined]
        self.embed_batch.set_batch_wait_timeout_s(self.limits.batch_wait_timeout_s)  # type: ignore[attr-defined]
        # Serve runs the constructor on the replica's event loop, where the poller then runs beside requests
        loop = asyncio.get_running_loop()
        self.poller = loop.create_task(self.follow_champion()) if self.source.follows else None

    def __del__(self) -> None:
        """Serve calls it when the replica stops: no alias poll once the model goes away."""
        poller = getattr(self, "poller", None)
        if poller is not None:
            poller.cancel()

    @api.get("/healthz", response_model=Health, summary="200 while the replica runs")
    async def healthz(self) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @api.get("/readyz", response_model=Ready, summary="200 with the served version once a model is loaded")
    async def readyz(self) -> JSONResponse:
        return self._answer(200, {"ready": True}, self.slot.current)

    @api.post(
        "/embed",
        response_model=EmbedResponse,
        responses=ERRORS,
        openapi_extra=request_body(EmbedBody),
        summary="Embed sentences of one language (and find their nearest stored sentences)",
    )
    async def embed(self, request: Request) -> JSONResponse:
        """The body is read up to serve.max_body_bytes, within serve.body_timeout_s and the slow bodies' caps
        (serve/body.py: 408, 413, 429), checked by `parse_embed` (413, 422 with a message), then embedded in a
        batch with concurrent requests."""
        try:
            body = await self._body(request)
            current = self.slot.current
            parsed = parse_embed(body, self.limits, current.embedder.languages, stored=current.searchable)
            result = await self.embed_batch(parsed)
            if isinstance(result, RequestRejected):  # found in the batch: each request gets its own answer
                raise result
            answer, served = result
        except RequestRejected as exc:
            return self._refused(exc)
        return self._answer(200, answer, served)

    @api.post(
        "/translate",
        response_model=TranslateResponse,
        responses=ERRORS,
        openapi_extra=request_body(TranslateBody),
        summary="Translate sentences of one language into another through the interlingua",
    )
    async def translate(self, request: Request) -> JSONResponse:
        """The body is read and its sentences checked as /embed's (408, 413, 429, 422), then `parse_translate`'s
        target and beam (422) and cost (413); it then waits for the replica's decoder (one translation at a
        time), and the model that decodes it is held until it is done (a swap meanwhile drains it)."""
        try:
            parsed = parse_translate(await self._body(request), self.limits, self.slot.current.embedder.languages)
            async with self.decoding:
                with self.slot.use() as served:
                    result = await answer_translation(parsed, served)
            if isinstance(result, RequestRejected):
                raise result
        except RequestRejected as exc:
            return self._refused(exc)
        return self._answer(200, result, served)

    async def _body(self, request: Request) -> bytes:
        """The request's body: refused by its declared length, else read within the body limits (serve/body.py)."""
        check_length(request.headers.get("content-length"), self.limits)
        return await read_body(request, self.limits, self.slow_bodies)

    def _refused(self, exc: RequestRejected) -> JSONResponse:
        """A refused request's answer: what to change, and the version serving now."""
        return JSONResponse({"error": str(exc), "model_version": self.slot.current.version}, exc.status)

    @staticmethod
    def _answer(status: int, body: Mapping[str, object], served: ServedModel) -> JSONResponse:
        body = {**body, **served.identity}
        return JSONResponse(body, status, headers={"X-Model-Version": served.version})

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.01)  # set from the config in __init__
    async def embed_batch(self, requests: list[EmbedRequest]) -> list[Any]:
        """Each request's (answer, model) or its RequestRejected (`batch.answer_batch`: one request's failure is
        its own); one model answers the whole batch, and holds it until the batch is done (a swap meanwhile
        drains it)."""
        with self.slot.use() as served:
            results = await answer_batch(requests, served)
        return [r if isinstance(r, RequestRejected) else (r, served) for r in results]

    async def follow_champion(self) -> None:
        """Every `poll_seconds`: read the alias; a new version is loaded beside the served one, then swapped
        in (`ModelSlot.swap`) when `serve.swap` admits it (`models.poll_champion`). A failure is logged and the
        served model stays."""
        while True:
            await asyncio.sleep(self.limits.poll_seconds)  # a polling period, not a synchronisation
            try:
                await poll_champion(self.source, self.slot, self.limits.swap, self.warned)
            except Exception as exc:  # noqa: BLE001 - the served model keeps answering; the next poll retries
                log.warning("champion poll failed, still serving version %s: %s", self.slot.current.version, exc)


def application(config: Config, scratch: str | None = None):
    """The bound deployment of `config.serve`: replicas, CPUs, and the bounds on ongoing and queued requests;
    `scratch`: the folder the replicas download champions into (the caller removes it)."""
    limits = config.serve
    # `serve.deployment` makes the class a Deployment; its typing keeps the class's own
    return EmbeddingServer.options(  # type: ignore[attr-defined]
        num_replicas=limits.replicas,
        max_ongoing_requests=limits.max_ongoing_requests,
        max_queued_requests=limits.max_queued_requests,
        ray_actor_options={"num_cpus": limits.cpus_per_replica},
    ).bind(config.to_dict(), scratch)


def http_options(limits: ServeConfig) -> dict[str, str | int]:
    """Where Serve's HTTP proxy listens: serve.host (127.0.0.1 unless configured) and serve.port."""
    return {"host": limits.host, "port": limits.port}


def start(config: Config, scratch: str | None = None) -> str:
    """Start the endpoint on the Ray cluster of `runtime.ray_address` (a local one when unset) and return its
    URL once it answers; `stop` ends it. `scratch`: see `application`."""
    from orchestration.adapters.cluster import ensure_ray

    ensure_ray(
        config.runtime.ray_address,
        dashboard=config.runtime.ray_dashboard,
        worker_niceness=config.runtime.worker_niceness,
    )
    serve.start(http_options=http_options(config.serve))
    serve.run(application(config, scratch), name=DEPLOYMENT, route_prefix="/", blocking=False)
    return f"http://{config.serve.host}:{config.serve.port}"


def stop() -> None:
    """Remove the endpoint (its replicas finish what they hold) and Serve's proxy."""
    serve.shutdown()
