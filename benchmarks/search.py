"""Sharded Ray search against a single-process faiss search on the same vectors, with peak memory.

    .venv/bin/python benchmarks/search.py [--sizes 10000 30000 100000] [--dim 1024] [--queries 10000]
                                          [--shards 4] [--repeats 3]

For each candidate count S: S random unit vectors (a translation pair is a
noisy copy, so the top-1 is meaningful), `--queries` queries, exact cosine
top-5. "single" is one faiss IndexFlatIP search over all S in this process;
"ray" is the path of `evaluation.xsim.search_pairs` on a `RayExecutor`, from its parts: the candidates put
in the object store in `--shards` shards, one Ray task per shard (`search_shard`), results merged
(`merge`; object-store transfer and merge included). Both give
the same ids (checked). Peak memory: the highest sum of resident memory of
this process and the Ray workers, sampled every 50 ms, above the idle
baseline. Medians of `--repeats`, interleaved.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluation.search import merge, normalized, search_shard  # noqa: E402


def rss_mb(pids_of_interest) -> float:
    total = 0
    for pid in pids_of_interest():
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def ray_pids() -> list[int]:
    pids = [int(Path("/proc/self").resolve().name)]
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"ray::" in cmd or b"default_worker.py" in cmd:
            pids.append(int(proc.name))
    return pids


class PeakMemory:
    def __enter__(self):
        self.base = rss_mb(ray_pids)
        self.peak, self.running = self.base, True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while self.running:
            self.peak = max(self.peak, rss_mb(ray_pids))
            time.sleep(0.05)

    def __exit__(self, *exc):
        self.running = False
        self.thread.join()

    @property
    def above_base(self) -> float:
        return self.peak - self.base


def single(queries: np.ndarray, candidates: np.ndarray, k: int):
    return search_shard(queries, candidates, k, "cosine")


def sharded(task, queries_ref, shard_refs, nq: int, k: int):
    import ray

    parts = ray.get([task.remote(queries_ref, ref, k, "cosine", offset) for offset, ref in shard_refs])
    return merge(parts, nq, k, "cosine")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 30000, 100000])
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--queries", type=int, default=10000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("-k", type=int, default=5)
    args = parser.parse_args()

    import ray

    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    task = ray.remote(num_cpus=1)(search_shard)
    rng = np.random.default_rng(0)
    print(
        f"exact cosine top-{args.k}, {args.dim}-d, {args.queries} queries, {args.shards} shards, "
        f"medians of {args.repeats}"
    )
    print(f"{'S':>8}{'single s':>10}{'ray s':>9}{'ratio':>7}{'single MB':>11}{'ray MB':>9}")
    for size in args.sizes:
        candidates = normalized(rng.standard_normal((size, args.dim), dtype=np.float32), "cosine")
        nq = min(args.queries, size)
        queries = normalized(candidates[:nq] + 0.5 * rng.standard_normal((nq, args.dim), dtype=np.float32), "cosine")
        step = -(-size // args.shards)
        times = {"single": [], "ray": []}
        memory = {"single": 0.0, "ray": 0.0}
        for _ in range(args.repeats):
            with PeakMemory() as mem:
                start = time.perf_counter()
                expected = single(queries, candidates, args.k)
                times["single"].append(time.perf_counter() - start)
            memory["single"] = max(memory["single"], mem.above_base)
            with PeakMemory() as mem:
                start = time.perf_counter()
                queries_ref = ray.put(queries)
                shard_refs = [(s, ray.put(candidates[s : s + step])) for s in range(0, size, step)]
                got = sharded(task, queries_ref, shard_refs, nq, args.k)
                times["ray"].append(time.perf_counter() - start)
                del queries_ref, shard_refs
            memory["ray"] = max(memory["ray"], mem.above_base)
            if not np.array_equal(got[1], expected[1]):
                raise AssertionError(f"sharded and single-process results differ at S={size}")
        s, r = statistics.median(times["single"]), statistics.median(times["ray"])
        print(f"{size:>8}{s:>10.2f}{r:>9.2f}{r / s:>7.2f}{memory['single']:>11.0f}{memory['ray']:>9.0f}")
    ray.shutdown()


if __name__ == "__main__":
    main()
