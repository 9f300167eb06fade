"""`interlingua serve` over HTTP on loopback: throughput and latency, overload, and a champion swap under load.

    .venv/bin/python benchmarks/serve_http.py [--model DIR] [--seconds 20] [--sentences 8] [serve.KEY=VALUE ...]

The model (`--model DIR`, e.g. runs/bible6-cpu/train/model; else an untrained model with the demo's encoder:
throughput does not depend on the weights) is registered as the champion of a fresh MLflow store (sqlite, in a
temporary folder) and served by `interlingua serve` in its own process, with the given `serve.*` overrides.
The load generator is a bounded asyncio client (aiohttp) in this process; each request embeds `--sentences`
English verses.

1. Closed loop at 1, 8 and 64 concurrent clients, `--seconds` each: requests/s, sentences/s, p50/p99 latency.
2. Open loop at twice the best request rate (the sustainable load) for `--seconds`, at most
   `--max-outstanding` requests in flight on the client: the answers by status (only 200 and 503 may come
   back) and the server's memory (the RSS of its process tree, Ray's processes included) against phase 1's.
3. The swap: 8 clients in a closed loop while the same model is registered again and promoted; every request
   must succeed, and answers must switch version. Any other status or a connection error counts as failed.
Figures depend on the machine; take them on a quiet one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NAME = "bench"


class Phase:
    """What one phase's requests got back: statuses, latencies of the 200s, the versions that answered."""

    def __init__(self) -> None:
        self.statuses: Counter = Counter()
        self.latencies: list[float] = []
        self.versions: list[str] = []
        self.seconds = 0.0

    def add(self, status: int, seconds: float, version: str | None) -> None:
        self.statuses[status] += 1
        if status == 200:
            self.latencies.append(seconds)
            self.versions.append(version or "?")

    def summary(self, sentences: int) -> dict:
        ok = len(self.latencies)
        q = statistics.quantiles(self.latencies, n=100) if ok >= 2 else [float("nan")] * 99
        return {
            "requests_per_s": ok / self.seconds,
            "sentences_per_s": ok * sentences / self.seconds,
            "p50_ms": 1000 * q[49],
            "p99_ms": 1000 * q[98],
            "statuses": dict(self.statuses),
        }


async def one(session, url: str, body: bytes, phase: Phase) -> None:
    import aiohttp

    started = time.perf_counter()
    try:
        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
            answer = await response.read()
            version = json.loads(answer).get("model_version") if response.status == 200 else None
            phase.add(response.status, time.perf_counter() - started, version)
    except (TimeoutError, aiohttp.ClientError) as exc:
        phase.add(-1, 0.0, None)  # a connection error: a failed request
        phase.statuses[type(exc).__name__] += 1


async def closed_loop(url: str, body: bytes, clients: int, until, phase: Phase | None = None) -> Phase:
    """`clients` clients, each sending its next request when the last is answered, until `until()`; into
    `phase` when given (read while it runs)."""
    import aiohttp

    phase = phase or Phase()
    started = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as session:

        async def client() -> None:
            while not until():
                await one(session, url, body, phase)

        await asyncio.gather(*(client() for _ in range(clients)))
    phase.seconds = time.perf_counter() - started
    return phase


async def open_loop(url: str, body: bytes, rate: float, seconds: float, max_outstanding: int) -> Phase:
    """Requests sent at `rate` per second whatever the answers, at most `max_outstanding` in flight here (the
    client's own bound: what it could not send counts as status "client-bound")."""
    import aiohttp

    phase, tasks = Phase(), set()
    started = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=max_outstanding)) as session:
        sent = 0
        while (now := time.perf_counter() - started) < seconds:
            due = int(now * rate) - sent
            for _ in range(due):
                if len(tasks) >= max_outstanding:
                    phase.statuses["client-bound"] += 1
                    continue
                task = asyncio.create_task(one(session, url, body, phase))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            sent += due
            await asyncio.sleep(0.001)  # the arrival clock's tick
        await asyncio.gather(*tasks)
    phase.seconds = time.perf_counter() - started
    return phase


class Memory:
    """The peak RSS (bytes) of a process and its descendants, sampled in a thread."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.root, self.peak, self.done = psutil.Process(pid), 0, threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        import psutil

        while not self.done.wait(0.25):
            total = 0
            for proc in [self.root, *self.root.children(recursive=True)]:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)

    def __enter__(self) -> Memory:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()


def register(uri: str, model_dir: Path) -> str:
    from orchestration.adapters import registry, tracking
    from orchestration.embedding.embedder import SentenceEmbedder
    from orchestration.lifecycle import packaging

    run = tracking.start_run(uri, "bench", "model", {})
    dim = SentenceEmbedder.load(model_dir).model.embedding_dim
    info = packaging.log_model(uri, run, model_dir, dim)
    version = registry.register_model(uri, info.model_uri, NAME, {})
    registry.promote(uri, NAME, version)
    return version


def start_server(tmp: Path, uri: str, port: int, overrides: list[str]) -> subprocess.Popen:
    import urllib.request

    log = open(tmp / "server.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestration.cli",
            "serve",
            f"run_dir={tmp / 'run'}",
            f"tracking.uri={uri}",
            f"registry.model_name={NAME}",
            f"serve.port={port}",
            *overrides,
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
                if response.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)  # polling the server's readiness, with the deadline above
    proc.kill()
    raise RuntimeError(f"the server did not start; see {tmp / 'server.log'}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", help="a model directory (default: an untrained one with the demo's encoder)")
    p.add_argument("--seconds", type=float, default=20.0, help="per phase")
    p.add_argument("--sentences", type=int, default=8, help="verses per request")
    p.add_argument("--clients", default="1,8,64")
    p.add_argument("--max-outstanding", type=int, default=1024)
    p.add_argument("--closed-only", action="store_true", help="phase 1 alone (no overload, no swap)")
    p.add_argument("--json", help="also write the figures here")
    p.add_argument("overrides", nargs="*", help="serve.KEY=VALUE for the server")
    args = p.parse_args()

    from benchmarks.embed import model_dir as untrained_model_dir
    from benchmarks.embed import verses
    from tests.support.procs import free_ports

    body = json.dumps({"sentences": verses(args.sentences), "lang": "en"}).encode()
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        tmp = Path(tmp)
        model = Path(args.model) if args.model else untrained_model_dir(verses(20000), tmp / "model")
        uri = f"sqlite:///{tmp / 'mlflow.db'}"
        register(uri, model)
        (port,) = free_ports(1)
        proc = start_server(tmp, uri, port, args.overrides)
        url = f"http://127.0.0.1:{port}/embed"
        try:
            figures = run_phases(proc, url, body, args, lambda: register(uri, model))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
    report(figures, args)


def run_phases(proc: subprocess.Popen, url: str, body: bytes, args, promote) -> dict:
    figures: dict = {"closed": {}}
    with Memory(proc.pid) as memory:
        for clients in (int(c) for c in args.clients.split(",")):
            end = time.perf_counter() + args.seconds
            phase = asyncio.run(closed_loop(url, body, clients, lambda end=end: time.perf_counter() > end))
            figures["closed"][clients] = phase.summary(args.sentences)
        figures["rss_closed_mb"] = memory.peak / 2**20
    if args.closed_only:
        return figures
    sustainable = max(f["requests_per_s"] for f in figures["closed"].values())
    with Memory(proc.pid) as memory:
        phase = asyncio.run(open_loop(url, body, 2 * sustainable, args.seconds, args.max_outstanding))
        figures["overload"] = {"rate_per_s": 2 * sustainable, **phase.summary(args.sentences)}
        figures["rss_overload_mb"] = memory.peak / 2**20
    figures["swap"] = swap(url, body, promote, args.sentences)
    return figures


def swap(url: str, body: bytes, promote, sentences: int) -> dict:
    """8 clients in a closed loop; a new version is promoted; the loop ends 20 answers after the switch."""
    phase, switched, new = Phase(), threading.Event(), []

    def until() -> bool:
        return switched.is_set() and phase.versions.count(new[0]) >= 20

    thread = threading.Thread(target=lambda: asyncio.run(closed_loop(url, body, 8, until, phase)))
    thread.start()
    new.append(promote())
    switched.set()
    thread.join(timeout=600)
    failed = sum(n for status, n in phase.statuses.items() if status != 200)
    return {
        "new_version": new[0],
        "versions": dict(Counter(phase.versions)),
        "failed": failed,
        **phase.summary(sentences),
    }


def report(figures: dict, args) -> None:
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1, default=str) + "\n")
    print(f"interlingua serve over HTTP, {args.sentences} verses per request, {args.seconds:.0f} s per phase")
    print(f"{'clients':>8} {'req/s':>8} {'sent/s':>8} {'p50 ms':>8} {'p99 ms':>8}  statuses")
    for clients, f in figures["closed"].items():
        print(
            f"{clients:>8} {f['requests_per_s']:8.1f} {f['sentences_per_s']:8.0f} {f['p50_ms']:8.1f} "
            f"{f['p99_ms']:8.1f}  {f['statuses']}"
        )
    if "overload" not in figures:
        print(f"server RSS (its process tree): peak {figures['rss_closed_mb']:.0f} MB in the closed loops")
        return
    o = figures["overload"]
    others = {s: n for s, n in o["statuses"].items() if s not in (200, 503, "client-bound")}
    print(
        f"overload at {o['rate_per_s']:.1f} req/s (2x): {o['statuses']}; p99 of the 200s {o['p99_ms']:.1f} ms; "
        f"other answers: {others or 'none'}"
    )
    print(
        f"server RSS (its process tree): peak {figures['rss_closed_mb']:.0f} MB in the closed loops, "
        f"{figures['rss_overload_mb']:.0f} MB under overload"
    )
    s = figures["swap"]
    print(
        f"swap to version {s['new_version']} under 8 clients: versions answered {s['versions']}, "
        f"failed requests {s['failed']}, p99 {s['p99_ms']:.1f} ms"
    )


if __name__ == "__main__":
    main()
