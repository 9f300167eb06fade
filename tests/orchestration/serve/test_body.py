"""How `interlingua serve` reads a body against slow clients (serve/body.py), without Ray or HTTP: requests whose
bodies arrive whole, dribble, or never end, on one event loop as in a replica. Over HTTP: test_edge.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from orchestration.config.stages import ServeConfig
from orchestration.serve.body import SlowBodies, read_body
from orchestration.serve.request import RequestRejected

LIMITS = ServeConfig(
    body_timeout_s=1.0, slow_body_s=0.1, max_slow_bodies=2, max_slow_bodies_per_client=1, max_body_bytes=100
)


@dataclass
class Address:
    host: str


@dataclass
class Body:
    """A request from `host` whose body is `chunks`, one every `every_s` seconds; `stalls`: then nothing more."""

    host: str
    chunks: tuple[bytes, ...] = (b'{"sentences": [], "lang": "en"}',)
    every_s: float = 0.0
    stalls: bool = False

    @property
    def client(self) -> Address:
        return Address(self.host)

    async def stream(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            await asyncio.sleep(self.every_s)
            yield chunk
        if self.stalls:
            await asyncio.Event().wait()


def refusal(coroutine) -> tuple[int, str]:
    with pytest.raises(RequestRejected) as caught:
        asyncio.run(coroutine)
    return caught.value.status, str(caught.value)


def test_a_body_that_arrives_whole_or_in_time_is_read():
    slow = SlowBodies(LIMITS)
    assert asyncio.run(read_body(Body("10.0.0.1"), LIMITS, slow)) == b'{"sentences": [], "lang": "en"}'
    dribbled = Body("10.0.0.1", chunks=(b"ab",) * 5, every_s=0.05)  # slow (0.25 s), but whole in time
    assert asyncio.run(read_body(dribbled, LIMITS, slow)) == b"ab" * 5
    assert slow.total == 0 and not slow.by_client


def test_a_body_not_whole_within_the_deadline_is_408_and_a_large_one_413():
    slow = SlowBodies(LIMITS)
    status, message = refusal(read_body(Body("10.0.0.1", chunks=(b"a",), stalls=True), LIMITS, slow))
    assert (status, message) == (
        408,
        "the body did not arrive whole within serve.body_timeout_s (1.0 s); send it at once",
    )
    status, message = refusal(read_body(Body("10.0.0.1", chunks=(b"a" * 60,) * 2, every_s=0.01), LIMITS, slow))
    assert status == 413 and "serve.max_body_bytes (100 bytes)" in message
    assert slow.total == 0 and not slow.by_client


def test_slow_bodies_are_capped_per_client_and_per_replica_and_fast_ones_still_pass():
    """Four clients' bodies stall: one client's second is a 408 once slow, and its next request a 429 before
    its body is read; the replica waits for two slow bodies, so a third client's is a 408; a fast body of any
    client, that one's too, is read meanwhile. Ended or cancelled reads give their room back."""

    async def scenario() -> None:
        slow = SlowBodies(LIMITS)

        def stalled(host: str) -> asyncio.Task:
            return asyncio.ensure_future(read_body(Body(host, chunks=(b"{",), stalls=True), LIMITS, slow))

        first, second = stalled("10.0.0.1"), stalled("10.0.0.1")
        await asyncio.sleep(3 * LIMITS.slow_body_s)
        refused, held = (first, second) if first.done() else (second, first)
        assert refused.done() and not held.done()
        assert isinstance(error := refused.exception(), RequestRejected) and error.status == 408
        assert "this client (10.0.0.1) has serve.max_slow_bodies_per_client such bodies" in str(error)
        with pytest.raises(RequestRejected) as caught:
            await read_body(Body("10.0.0.1"), LIMITS, slow)
        assert caught.value.status == 429
        assert str(caught.value) == (
            "this client (10.0.0.1) has 1 request bodies arriving slowly, as many as "
            "serve.max_slow_bodies_per_client allows; send each body whole, at once"
        )
        other = stalled("10.0.0.2")
        await asyncio.sleep(3 * LIMITS.slow_body_s)
        assert not other.done() and slow.total == 2
        third = stalled("10.0.0.3")
        await asyncio.sleep(3 * LIMITS.slow_body_s)
        assert third.done() and isinstance(error := third.exception(), RequestRejected) and error.status == 408
        assert "the replica is waiting for serve.max_slow_bodies such bodies" in str(error)
        assert await read_body(Body("10.0.0.3"), LIMITS, slow)  # fast: never counted
        held.cancel()  # its client gone
        other.cancel()
        await asyncio.gather(held, other, return_exceptions=True)
        assert slow.total == 0 and not slow.by_client
        assert await read_body(Body("10.0.0.1"), LIMITS, slow)

    asyncio.run(scenario())


def test_the_slow_body_limits_must_leave_room_for_fast_requests():
    with pytest.raises(ValueError, match="slow clients could hold every request"):
        ServeConfig(max_ongoing_requests=16, max_batch_size=16, max_slow_bodies=16)
    with pytest.raises(ValueError, match="no body would ever count as slow"):
        ServeConfig(body_timeout_s=1, slow_body_s=1)
    with pytest.raises(ValueError, match="max_slow_bodies_per_client"):
        ServeConfig(max_slow_bodies=2, max_slow_bodies_per_client=3)
