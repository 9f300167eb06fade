"""Reading an /embed body so that slow clients cannot starve fast ones.

    slow = SlowBodies(limits)                        # one per replica
    body = await read_body(request, limits, slow)    # the bytes, or RequestRejected 408, 413 or 429

Ray Serve's proxy hands a request to a replica once its headers are in; the replica then pulls the body from the
proxy. A body that dribbles in holds one of the replica's `max_ongoing_requests` for as long as it dribbles, so a
hundred slow clients left no room for any other request (issue 71: every good request beside them was a 503).
Ray Serve 2.60 and its Uvicorn have no body deadline and no limit per client (`HTTPOptions.request_timeout_s`
bounds the whole request, embedding and queueing included, and a client lifts it with Ray's own
`x-request-timeout-seconds: 0` header), so the replica keeps both:

1. the body arrives whole within `serve.body_timeout_s` of the replica starting to read it, else 408;
2. a body still arriving after `serve.slow_body_s` is slow: a replica waits for at most `max_slow_bodies` slow
   bodies at once, one client (its address, as the proxy saw it) for at most `max_slow_bodies_per_client`; a body
   that turns slow beyond either cap is a 408 then, and a client at its cap gets 429 before its body is read.

So past `slow_body_s`, slow bodies hold at most `max_slow_bodies` of a replica's requests (fewer than
`max_ongoing_requests`: the config checks), whatever the number of slow clients; a fast body (the whole of a
normal request is in the proxy before the replica asks for it) never counts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Protocol

from orchestration.config.stages import ServeConfig
from orchestration.serve.request import RequestRejected


class Address(Protocol):
    @property
    def host(self) -> str: ...


class Streamed(Protocol):
    """What `read_body` needs of a request (Starlette's `Request`)."""

    @property
    def client(self) -> Address | None: ...

    def stream(self) -> AsyncIterator[bytes]: ...


class SlowBodies:
    """The slow bodies one replica is waiting for, by client (rule 2 above). Used from the replica's event loop
    alone, so the counts need no lock."""

    def __init__(self, limits: ServeConfig) -> None:
        self.limits = limits
        self.by_client: Counter[str] = Counter()
        self.total = 0

    def admit(self, client: str) -> None:
        """429 when `client` has as many slow bodies as it may: its next request waits until one of them ends."""
        held = self.by_client[client]
        if held >= self.limits.max_slow_bodies_per_client:
            raise RequestRejected(
                429,
                f"this client ({client}) has {held} request bodies arriving slowly, as many as "
                "serve.max_slow_bodies_per_client allows; send each body whole, at once",
            )

    @contextlib.contextmanager
    def hold(self, client: str) -> Iterator[None]:
        """One slow body of `client` while the context lasts; 408 when the client or the replica has no room for
        another."""
        wait = f"the body is still arriving after serve.slow_body_s ({self.limits.slow_body_s} s) and"
        if self.by_client[client] >= self.limits.max_slow_bodies_per_client:
            raise RequestRejected(
                408, f"{wait} this client ({client}) has serve.max_slow_bodies_per_client such bodies; send it at once"
            )
        if self.total >= self.limits.max_slow_bodies:
            raise RequestRejected(
                408, f"{wait} the replica is waiting for serve.max_slow_bodies such bodies; send it at once"
            )
        self.by_client[client] += 1
        self.total += 1
        try:
            yield
        finally:
            self.total -= 1
            self.by_client[client] -= 1
            if not self.by_client[client]:
                del self.by_client[client]


async def read_body(request: Streamed, limits: ServeConfig, slow: SlowBodies) -> bytes:
    """The body of `request`, read within `limits.body_timeout_s` and up to `limits.max_body_bytes` (413: a body
    without a Content-Length is bounded too); a slow one only while `slow` has room for it (see the module
    docstring). RequestRejected 408, 413 or 429 otherwise."""
    client = request.client.host if request.client else "an unknown address"
    slow.admit(client)
    reading = asyncio.ensure_future(_read_upto(request, limits.max_body_bytes))
    try:
        done, _ = await asyncio.wait({reading}, timeout=limits.slow_body_s)
        if not done:
            with slow.hold(client):
                done, _ = await asyncio.wait({reading}, timeout=limits.body_timeout_s - limits.slow_body_s)
        if not done:
            raise RequestRejected(
                408,
                f"the body did not arrive whole within serve.body_timeout_s ({limits.body_timeout_s} s); "
                "send it at once",
            )
        return reading.result()  # its RequestRejected 413, if it was one
    finally:
        reading.cancel()  # refused, or this request cancelled (its client gone): stop reading


async def _read_upto(request: Streamed, limit: int) -> bytes:
    """The body, read until it passes `limit` bytes (413)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestRejected(
                413, f"the body is above serve.max_body_bytes ({limit} bytes); send fewer sentences per request"
            )
        chunks.append(chunk)
    return b"".join(chunks)
