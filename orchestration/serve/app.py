"""`interlingua serve`: the embedding endpoint on Ray Serve.

    POST /embed   {"sentences": ["Dieu est amour."], "lang": "fr"}
                  -> 200 {"embeddings": [[...]], "model_version": "3", "dim": 256}
                  with "nearest": {"k": 3, "in": ["en"]}: also the nearest stored sentences of each
    GET  /healthz -> 200 while the replica runs;  GET /readyz -> 200 with the version once a model is loaded

Requests are checked against the `serve` limits before any work (serve/request.py: 413, 422 with a
message); concurrent requests are embedded together (`@serve.batch`, grouped by language), each failure
kept to the request that caused it (serve/batch.py); beyond
`max_ongoing_requests` per replica and `max_queued_requests` waiting, Ray Serve's proxy answers 503 at
once, so an overload costs no memory. With serve.model=champion each replica reads the alias every
`poll_seconds` and swaps to a newly promoted version without failing a request (serve/models.py); every
answer names the version that computed it (body and the X-Model-Version header).

Every listener of the endpoint is on the loopback address unless configured otherwise: Serve's HTTP proxy on
serve.host (127.0.0.1 by default), the replica's own gRPC server on the node's address (`bind_replica_grpc`),
which is 127.0.0.1 on the local Ray instance a command starts (`cluster.ensure_ray`).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

from orchestration.config import Config
from orchestration.config.stages import ServeConfig
from orchestration.serve.batch import answer_batch
from orchestration.serve.models import ModelSlot, ModelSource, ServedModel
from orchestration.serve.request import EmbedRequest, RequestRejected, check_length, parse_embed

log = logging.getLogger(f"ray.serve.{__name__}")  # Ray Serve shows its replicas' "ray.serve" loggers
DEPLOYMENT = "interlingua"


@serve.deployment(name=DEPLOYMENT)
class EmbeddingServer:
    """One replica: a loaded model (`ModelSlot`), the batching queue and, for a champion, the alias poller."""

    def __init__(self, config: dict[str, Any], scratch: str | None = None) -> None:
        from model.training import cpu_threads

        bind_replica_grpc()  # before Serve starts the replica's gRPC server, once this constructor returns
        self.config = Config.model_validate(config)
        self.limits = self.config.serve
        cpu_threads(max(1, int(self.limits.cpus_per_replica)))
        self.source = ModelSource(self.config, scratch=scratch)
        self.slot = ModelSlot(self.source.load(self.source.current_version()),
                              drain_timeout_s=self.limits.drain_timeout_s)
        self.embed_batch.set_max_batch_size(self.limits.max_batch_size)
        self.embed_batch.set_batch_wait_timeout_s(self.limits.batch_wait_timeout_s)
        # Serve runs the constructor on the replica's event loop, where the poller then runs beside requests
        loop = asyncio.get_running_loop()
        self.poller = loop.create_task(self.follow_champion()) if self.source.follows else None

    def __del__(self) -> None:
        """Serve calls it when the replica stops: no alias poll once the model goes away."""
        if getattr(self, "poller", None) is not None:
            self.poller.cancel()

    async def __call__(self, request: Request) -> JSONResponse:
        """The routes of the module docstring; anything else 404 (405 for a GET of /embed)."""
        path = request.url.path.rstrip("/")
        if path == "/healthz":
            return JSONResponse({"status": "ok"})
        if path == "/readyz":
            return self._answer(200, {"ready": True}, self.slot.current)
        if path != "/embed":
            return JSONResponse({"error": f"no route {path}; POST /embed, GET /healthz, /readyz"}, 404)
        if request.method != "POST":
            return JSONResponse({"error": "POST a JSON body to /embed"}, 405)
        try:
            check_length(request.headers.get("content-length"), self.limits)
            body = await _read_body(request, self.limits.max_body_bytes)
            current = self.slot.current
            parsed = parse_embed(body, self.limits, current.embedder.languages, stored=current.searchable)
            result = await self.embed_batch(parsed)
            if isinstance(result, RequestRejected):  # found in the batch: each request gets its own answer
                raise result
            answer, served = result
        except RequestRejected as exc:
            return JSONResponse({"error": str(exc), "model_version": self.slot.current.version}, exc.status)
        return self._answer(200, answer, served)

    @staticmethod
    def _answer(status: int, body: dict[str, Any], served: ServedModel) -> JSONResponse:
        body = {**body, "model_version": served.version}
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
        in (`ModelSlot.swap`). A failure is logged and the served model stays."""
        while True:
            await asyncio.sleep(self.limits.poll_seconds)  # a polling period, not a synchronisation
            try:
                version = await asyncio.to_thread(self.source.current_version)
                if version == self.slot.current.version:
                    continue
                started = time.monotonic()
                new = await asyncio.to_thread(self.source.load, version)
                await self.slot.swap(new, loaded_s=time.monotonic() - started)
            except Exception as exc:  # noqa: BLE001 - the served model keeps answering; the next poll retries
                log.warning("champion poll failed, still serving version %s: %s", self.slot.current.version, exc)


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, read until it passes `limit` bytes (413): a body without a Content-Length is bounded too."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestRejected(413, f"the body is above serve.max_body_bytes ({limit} bytes); "
                                       "send fewer sentences per request")
        chunks.append(chunk)
    return b"".join(chunks)


def application(config: Config, scratch: str | None = None):
    """The bound deployment of `config.serve`: replicas, CPUs, and the bounds on ongoing and queued requests;
    `scratch`: the folder the replicas download champions into (the caller removes it)."""
    limits = config.serve
    return EmbeddingServer.options(
        num_replicas=limits.replicas, max_ongoing_requests=limits.max_ongoing_requests,
        max_queued_requests=limits.max_queued_requests, ray_actor_options={"num_cpus": limits.cpus_per_replica},
    ).bind(config.to_dict(), scratch)


def http_options(limits: ServeConfig) -> dict[str, Any]:
    """Where Serve's HTTP proxy listens: serve.host (127.0.0.1 unless configured) and serve.port."""
    return {"host": limits.host, "port": limits.port}


def node_address(address: str, node_ip: str) -> str:
    """A gRPC listening `address` ("[::]:0", "0.0.0.0:0": every interface) on `node_ip` alone; any other left
    as it is."""
    host, _, port = address.rpartition(":")
    if host not in ("[::]", "0.0.0.0", ""):
        return address
    return f"[{node_ip}]:{port}" if ":" in node_ip else f"{node_ip}:{port}"


def bind_replica_grpc() -> None:
    """Bind the replica's own gRPC server to the node's address instead of every interface. Ray Serve 2.60
    starts it in each replica, for calls from other deployments, on "[::]:0", with no option to change that
    (ray/serve/_private/replica.py, `_on_initialized`, run after the deployment's constructor); its callers
    reach it at the node's address (`RunningReplicaInfo.node_ip`, `ray.util.get_node_ip_address()`), so that
    address alone loses nothing: 127.0.0.1 on the local instance a command starts, the host's own on a cluster.
    Called in the replica's process. A Ray without the function it wraps is logged, and tests/orchestration/
    serve/test_server.py checks the listeners of a running server."""
    import ray
    from ray.serve._private import replica

    add_port = getattr(replica, "add_port_to_grpc_server", None)
    if add_port is None:
        log.warning("this Ray Serve has no replica.add_port_to_grpc_server: its replica's gRPC server may listen "
                    "on every interface")
        return
    if getattr(add_port, "node_ip", None) is not None:  # wrapped already (a second replica in this process)
        return
    node_ip = ray.util.get_node_ip_address()

    def on_node(server, address: str):
        return add_port(server, node_address(address, node_ip))

    on_node.node_ip = node_ip  # type: ignore[attr-defined]
    replica.add_port_to_grpc_server = on_node


def start(config: Config, scratch: str | None = None) -> str:
    """Start the endpoint on the Ray cluster of `runtime.ray_address` (a local one when unset) and return its
    URL once it answers; `stop` ends it. `scratch`: see `application`."""
    from orchestration.adapters.cluster import ensure_ray

    ensure_ray(config.runtime.ray_address, dashboard=config.runtime.ray_dashboard,
               worker_niceness=config.runtime.worker_niceness)
    serve.start(http_options=http_options(config.serve))
    serve.run(application(config, scratch), name=DEPLOYMENT, route_prefix="/", blocking=False)
    return f"http://{config.serve.host}:{config.serve.port}"


def stop() -> None:
    """Remove the endpoint (its replicas finish what they hold) and Serve's proxy."""
    serve.shutdown()
