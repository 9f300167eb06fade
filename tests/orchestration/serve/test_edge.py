"""The serving edge over HTTP (issue 71): slow clients and expensive requests beside good ones, on the package's
server (conftest.py: 4 requests a replica, 6 queued; a body within 15 s, slow after 1 s, 2 slow bodies a
replica, 1 a client; 32 neighbours a request). No good request fails beside them. Without Ray:
test_body.py, test_request.py."""

from __future__ import annotations

import errno
import select
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import numpy as np
import pytest

from tests.support.procs import wait_for
from tests.support.serving import post

pytestmark = pytest.mark.server

# Slow clients connect from ten loopback addresses (all of 127/8 is the loopback interface), ten each; the good
# ones from 127.0.0.1. Uvicorn takes X-Forwarded-For from 127.0.0.1 alone, so these addresses are as seen.
SLOW_ADDRESSES = [f"127.0.0.{i}" for i in range(2, 12)]
SLOW_HEAD = b"POST /embed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n"


class Dribblers:
    """`n` clients whose bodies never end: after the headers, one byte every `every_s` seconds each, from a
    thread, until each is answered (its status; 0: closed without one) or the context ends."""

    def __init__(self, url: str, n: int, every_s: float = 0.2) -> None:
        address = urlsplit(url)
        self.socks: list[socket.socket] = []
        for i in range(n):
            sock = socket.socket()
            sock.bind((SLOW_ADDRESSES[i % len(SLOW_ADDRESSES)], 0))
            sock.connect((address.hostname, address.port))
            sock.sendall(SLOW_HEAD + b'{"sentences": ["')
            sock.setblocking(False)
            self.socks.append(sock)
        self.received: dict[int, bytes] = {i: b"" for i in range(n)}
        self.status: dict[int, int] = {}
        self.every_s = every_s
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._dribble, daemon=True)

    def __enter__(self) -> Dribblers:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join(timeout=30)
        for sock in self.socks:
            sock.close()

    def pending(self) -> set[int]:
        return set(range(len(self.socks))) - set(self.status)

    def address(self, i: int) -> str:
        return self.socks[i].getsockname()[0]

    def _dribble(self) -> None:
        while not self.done.wait(self.every_s):
            for i in self.pending():
                try:
                    self.socks[i].send(b"a")
                except BlockingIOError:
                    pass
                except OSError:  # closed by the server
                    self.status.setdefault(i, 0)
            readable, _, _ = select.select(self.socks, [], [], 0)
            for sock in readable:
                i = self.socks.index(sock)
                try:
                    data = sock.recv(65536)
                except OSError as exc:
                    data = b"" if exc.errno in (errno.ECONNRESET, errno.EPIPE) else b"?"
                self.received[i] += data
                line = self.received[i].split(b"\r\n", 1)
                if len(line) == 2:
                    self.status.setdefault(i, int(line[0].split()[1]))
                elif not data:
                    self.status.setdefault(i, 0)


def test_slow_clients_cannot_starve_fast_ones(server, verse):
    """100 clients dribble their bodies byte by byte (before the fix, every good request beside them was a
    503). Within seconds all but the slow bodies a replica waits for (one a client) are answered: 503 beyond
    the queue, 408 once slow without room, 429 for a client at its cap; the good requests sent beside those
    held are all 200 with their embeddings; the held ones end in a 408 at serve.body_timeout_s. Slow (the
    package's one server starts with the first of its tests, and the held bodies' deadline is waited out: the
    server's own clock, in another process, ends them)."""
    limits = server["limits"]
    good = {"sentences": [verse("k", 8, 1, 1)], "lang": "en"}
    expected = server["embedders"]["1"].embed(good["sentences"], "en")
    started = time.monotonic()
    assert post(f"{server['url']}/embed", good)[0] == 200
    one = time.monotonic() - started
    with Dribblers(server["url"], 100) as slow:
        dribbling = time.monotonic()
        wait_for(
            lambda: len(slow.pending()) <= limits.max_slow_bodies,
            30 + 20 * one,
            "the slow clients beyond the replica's caps to be answered",
        )
        held = slow.pending()
        assert len({slow.address(i) for i in held}) == len(held), "two slow bodies of one client held"
        assert set(slow.status.values()) <= {0, 408, 429, 503}, slow.status
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda _: post(f"{server['url']}/embed", good), range(8)))
        assert [status for status, _ in answers] == [200] * 8, answers
        for _, answer in answers:
            np.testing.assert_allclose(answer["embeddings"], expected, rtol=1e-4, atol=1e-5)
        if time.monotonic() - dribbling < limits.body_timeout_s:  # their deadline cannot have passed yet
            assert slow.pending() == held  # the caps made room, not the deadline
        wait_for(lambda: not slow.pending(), limits.body_timeout_s + 30, "the held slow bodies' deadline")
        for i in held:
            assert slow.status[i] == 408, slow.received[i]
            wait_for(lambda i=i: b"}" in slow.received[i], 10, "the body of the 408")
            assert f"serve.body_timeout_s ({limits.body_timeout_s} s)".encode() in slow.received[i], slow.received[i]


VERSES = 20  # Ruth 1:1-20 in English: one more than serve.max_sentences (16) and then some


def test_an_expensive_request_is_refused_and_fails_no_request_beside_it(server, verse):
    """Requests asking for neighbours (sentences, k, the languages of nearest.in, repeats among them), each sent
    beside a good request: each is answered as its cost says, 200 within serve.max_nearest_hits, 413 above it,
    422 for a language named twice (the probe of issue 71 among them: before the fix it held the replica for
    minutes); the good request is always 200 with its embedding."""
    from hypothesis import HealthCheck, example, given, settings
    from hypothesis import strategies as st

    limits = server["limits"]
    texts = [verse("k", 8, 1, n) for n in range(1, VERSES + 1)]
    good = {"sentences": [texts[0]], "lang": "en"}
    expected = np.asarray(server["embedders"]["1"].embed(good["sentences"], "en"))

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        st.integers(1, VERSES),
        st.integers(1, limits.max_nearest_k + 5),
        st.lists(st.sampled_from(["en", "fr"]), min_size=1, max_size=4),
    )
    @example(16, 100, ["fr"] * 100)  # the probe, at this server's max_sentences
    @example(16, 100, ["fr"])
    @example(16, 2, ["en"])  # exactly the budget: 32
    def check(n, k, targets):
        body = {"sentences": texts[:n], "lang": "en", "nearest": {"k": k, "in": targets}}
        with ThreadPoolExecutor(2) as pool:
            (status, answer), ok = pool.map(lambda b: post(f"{server['url']}/embed", b), [body, good])
        assert ok[0] == 200, ok
        np.testing.assert_allclose(ok[1]["embeddings"], expected, rtol=1e-4, atol=1e-5)
        if n > limits.max_sentences:
            assert (status, "serve.max_sentences" in answer["error"]) == (413, True), answer
        elif k > limits.max_nearest_k:
            assert (status, "serve.max_nearest_k" in answer["error"]) == (422, True), answer
        elif len(set(targets)) < len(targets):
            assert status == 422, answer
            assert answer["error"].startswith('"nearest.in" names ') and "more than once" in answer["error"]
        elif n * k * len(targets) > limits.max_nearest_hits:
            assert status == 413, answer
            assert f"= {n * k * len(targets)} neighbours, above serve.max_nearest_hits" in answer["error"], answer
        else:
            assert status == 200, answer
            assert len(answer["nearest"]) == n
            assert all(
                set(row) == set(targets) and all(1 <= len(row[t]) <= k for t in row) for row in answer["nearest"]
            )

    check()
