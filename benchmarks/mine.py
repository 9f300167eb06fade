"""Bitext-mining search (issue 17): exact kNN against `evaluation.mining.approximate_index`, both ways.

    .venv/bin/python benchmarks/mine.py [--sizes 10000 100000 1000000] [--dim 256] [--repeats 3]
                                        [--exact-above 100000] [--exact-sample 5000] [--index nprobe=32 ...]

For S sentences per side (x and y), the k = 4 nearest neighbours by cosine in
both directions, x -> y and y -> x, as the ratio margin needs:

- exact: `evaluation.search.search`, a faiss flat inner-product index over the
  L2-normalized vectors, built and searched block by block of `--block`
  candidates and merged (memory bounded by the block, not S x S);
- approximate: `evaluation.mining.approximate_index` on the candidate side
  (IVF-PQ trained on a sample, `nprobe` lists per query, the shortlist
  re-ranked exactly by IndexRefineFlat), built and searched in blocks of
  1,024 queries (one call for all would hold the lookup tables of every
  query: ~20 GB at 1M); its time includes training and adding;
- recall@4: `evaluation.search.recall_at(approximate, exact, 4)`, per direction.

Above `--exact-above` sentences the exact search of all S queries takes hours
on 2 cores, so it searches `--exact-sample` random queries (the same rows each
way) against all S candidates, and its time is extrapolated linearly to S
queries (marked ~); recall is measured on those queries. The approximate path
always searches all S queries.

Times are wall seconds and, in brackets, the CPU seconds of this process
(all threads), medians of `--repeats` runs with exact and approximate
interleaved so that both see the same load (one run above `--exact-above`).
The machine is shared: wall time swings with other people's jobs, CPU time
much less, so both speed-ups are printed. Memory: `index MB` is the size of
one side's approximate index (faiss.serialize_index: its codes plus the
float32 copy that IndexRefineFlat re-ranks from; the flat index of exact
search is S x D x 4 bytes), and the peaks are this process's resident
high-water mark during each path (kernel VmHWM, reset before it), which
includes the `data MB` of both sides that the process holds throughout.

libgomp's threads spin while they wait for work; on a loaded machine the
spinning takes the cores from the thread that has work, and faiss's short
parallel loops (k-means and PQ training above all) ran 10 to 20 times slower
in wall time. So the benchmark sets OMP_WAIT_POLICY=PASSIVE unless it is set
already; exact search measured the same or faster with it.

Data: a stand-in for sentence embeddings, since isotropic Gaussian vectors
are the worst case for any approximate index and unlike them. A sentence's
meaning lies around one of 4,000 topic centres, topic sizes following a Zipf
law (exponent 0.8: a few large topics, a long tail), at a heavy-tailed
distance from its centre (|Student t| with 3 degrees of freedom: most close,
a few far off); centres and spreads share a decaying spectrum (variance of
the i-th of D random orthogonal directions proportional to 1/i: embeddings
are anisotropic) and a common mean. x is each meaning plus language noise
(35 % of its norm, isotropic); y is, in random order, noisy copies of the
meanings of half of x (the true translations) and as many distractors drawn
afresh; both sides are L2-normalized. Random pairs then have cosine 0.14 +-
0.16, true pairs about 0.89, and a sentence's 4 nearest neighbours crowd
(for one query in ten, the 4th and the 64th nearest are within 0.02), which
is what makes ranking them hard. Each size prints a check of the data: the
share of true pairs that exact search ranks first from x.

On a GPU (not run here: faiss-cpu has no GPU code), install a faiss GPU
build instead (the faiss-gpu wheels, e.g. faiss-gpu-cu12, or conda's
faiss-gpu) and move an index with `faiss.index_cpu_to_all_gpus(index)`.
Exact search is then the simple choice up to millions: 1M x 1M x 256 is
2.6e14 multiply-adds, about 10 s per direction at the tens of fp32 TFLOP/s
of a current data-centre GPU, with 1 GB per side in GPU memory. The 4-bit
fast-scan codes of `approximate_index` have no GPU implementation
(index_cpu_to_gpu throws for such indexes); an approximate GPU path would be
GpuIndexIVFPQ (8-bit codes) or GpuIndexIVFFlat, for corpora beyond GPU memory.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before faiss loads libgomp: see the docstring

import argparse  # noqa: E402
import datetime  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import faiss  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluation.mining import QUERY_BLOCK, approximate_index  # noqa: E402
from evaluation.search import recall_at, search  # noqa: E402
from tests.support.memory import peak_rss  # noqa: E402

K = 4


def stand_in(
    size: int, dim: int, *, seed: int = 0, topics: int = 4000, paired: float = 0.5, block: int = 65_536
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Synthetic embeddings of two languages, as the module docstring describes: x (S, D), y (S, D),
    both L2-normalized float32, and the true pairs (P, 2) as (row of x, row of y). Built block by block."""
    rng = np.random.default_rng(seed)
    rotation = np.linalg.qr(rng.standard_normal((dim, dim)))[0]
    spread = np.arange(1, dim + 1) ** -0.5  # std of the i-th direction: variance ~ 1/i
    shape = (spread * np.sqrt(dim / (spread**2).sum()))[:, None] * rotation  # (D, D)
    mean = rng.standard_normal(dim)
    mean *= 0.5 * np.sqrt(dim) / np.linalg.norm(mean)
    centres = (rng.standard_normal((topics, dim)) @ shape + mean).astype(np.float32)  # (T, D)
    weights = np.arange(1, topics + 1) ** -0.8
    shape32 = shape.astype(np.float32)

    def meanings(count: int) -> np.ndarray:  # (count, D)
        topic = rng.choice(topics, count, p=weights / weights.sum())
        radius = 0.6 * np.abs(rng.standard_t(3, count)).astype(np.float32)[:, None]
        return centres[topic] + radius * (rng.standard_normal((count, dim), dtype=np.float32) @ shape32)

    def observed(z: np.ndarray) -> np.ndarray:  # meaning + language noise, normalized
        noise = rng.standard_normal(z.shape, dtype=np.float32)
        out = z + (0.35 / np.sqrt(dim)) * np.linalg.norm(z, axis=1, keepdims=True) * noise
        out = np.ascontiguousarray(out, dtype=np.float32)
        faiss.normalize_L2(out)
        return out

    x = np.empty((size, dim), dtype=np.float32)
    for s in range(0, size, block):  # x holds the meanings until y has copied its share of them
        x[s : s + block] = meanings(min(block, size - s))
    pairs = int(paired * size)
    source = rng.choice(size, pairs, replace=False)  # x row of each true pair
    y_row = rng.permutation(size)[:pairs]  # where each pair lands in y; the other rows are distractors
    origin = np.full(size, -1)
    origin[y_row] = source
    y = np.empty((size, dim), dtype=np.float32)
    for s in range(0, size, block):
        rows = origin[s : s + block]
        z = np.empty((len(rows), dim), dtype=np.float32)
        z[rows >= 0] = x[rows[rows >= 0]]
        z[rows < 0] = meanings(int((rows < 0).sum()))
        y[s : s + block] = observed(z)
    for s in range(0, size, block):
        x[s : s + block] = observed(x[s : s + block])
    return x, y, np.stack([source, y_row], axis=1)


@dataclass
class Timed:
    """Wall and CPU seconds of one run of a path (both directions), and what it found."""

    wall: float
    cpu: float
    ids: dict[str, np.ndarray] = field(repr=False)  # direction -> (Q, K) neighbour rows
    parts: dict[str, float] = field(default_factory=dict)  # wall seconds by step
    index_bytes: int = 0  # serialized size of the index over y


class Clock:
    def __enter__(self) -> Clock:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def exact(x: np.ndarray, y: np.ndarray, rows: np.ndarray | None, block: int) -> Timed:
    """Exact top-K both ways, of all queries or of `rows` only (the same rows of x and of y)."""
    ids = {}
    with Clock() as clock:
        for name, queries, candidates in (("x->y", x, y), ("y->x", y, x)):
            q = queries if rows is None else queries[rows]
            ids[name] = search(q, candidates, K, "cosine", shard_size=block)[1]
    return Timed(clock.wall, clock.cpu, ids)


def approximate(x: np.ndarray, y: np.ndarray, options: dict) -> Timed:
    """`approximate_index` over each side, searched by the other: top-K both ways, training included."""
    ids, parts, wall, cpu, index_bytes = {}, {"build": 0.0, "search": 0.0}, 0.0, 0.0, 0
    for name, queries, candidates in (("x->y", x, y), ("y->x", y, x)):
        with Clock() as build:
            index = approximate_index(candidates, **options)
        with Clock() as searching:  # in query blocks: see QUERY_BLOCK
            ids[name] = np.concatenate(
                [index.search(queries[s : s + QUERY_BLOCK], K)[1] for s in range(0, len(queries), QUERY_BLOCK)]
            )
        parts["build"] += build.wall
        parts["search"] += searching.wall
        wall += build.wall + searching.wall
        cpu += build.cpu + searching.cpu
        index_bytes = index_bytes or serialized_bytes(index)  # untimed
        del index
    return Timed(wall, cpu, ids, parts, index_bytes)


def serialized_bytes(index: faiss.Index) -> int:
    """len(faiss.serialize_index(index)), counted as it streams instead of held (1 GB at 1M)."""
    total = [0]

    def count(chunk: bytes) -> None:
        total[0] += len(chunk)

    faiss.write_index(index, faiss.PyCallbackIOWriter(count))
    return total[0]


def parse_options(pairs: list[str]) -> dict:
    """`--index key=value` pairs as keyword arguments of approximate_index (numbers as int/float)."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--index takes key=value (an approximate_index argument), got {pair!r}")
        for cast in (int, float):
            try:
                options[key] = cast(value)
                break
            except ValueError:
                continue
        else:
            options[key] = {"true": True, "false": False}.get(value.lower(), value)
    return options


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--dim", type=int, default=256, help="256: the demo model; 512: LASER/USE-sized")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--exact-above",
        type=int,
        default=100_000,
        help="above this many sentences, time the exact search of a sample and extrapolate",
    )
    parser.add_argument("--exact-sample", type=int, default=5_000)
    parser.add_argument("--block", type=int, default=262_144, help="candidates per exact-search block")
    parser.add_argument(
        "--index",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="approximate_index arguments, e.g. nprobe=32 k_factor=8",
    )
    args = parser.parse_args()
    options = parse_options(args.index)

    print(
        f"bitext-mining search, k={K} each way (x->y and y->x), {args.dim}-d, {datetime.date.today()}, "
        f"{os.cpu_count()} cores ({cpu_name()}), faiss {faiss.__version__} with "
        f"{faiss.omp_get_max_threads()} threads, OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}"
    )
    print(
        f"approximate_index({', '.join(f'{k}={v}' for k, v in options.items()) or 'defaults'}); "
        f"load average at start {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'S':>9} {'exact s (cpu)':>17} {'approx s (cpu)':>16} {'build/search':>13} "
        f"{'speed-up (cpu)':>15} {'recall@4 x->y':>14} {'y->x':>6} {'index MB':>9} {'data MB':>8} "
        f"{'peak MB exact':>14} {'approx':>7}"
    )
    notes, previous = [], None
    for size in args.sizes:
        x, y, pairs = stand_in(size, args.dim)
        sampled = size > args.exact_above
        rows = np.sort(np.random.default_rng(1).choice(size, args.exact_sample, replace=False)) if sampled else None
        scale = size / args.exact_sample if sampled else 1.0
        exact_runs, approx_runs, peaks = [], [], {"exact": 0.0, "approx": 0.0}
        for _ in range(1 if sampled else args.repeats):
            run, memory = peak_rss(exact, x, y, rows, args.block)
            exact_runs.append(run)
            peaks["exact"] = max(peaks["exact"], memory.peak_mb)
            run, memory = peak_rss(approximate, x, y, options)
            approx_runs.append(run)
            peaks["approx"] = max(peaks["approx"], memory.peak_mb)
        ex_wall = scale * median([r.wall for r in exact_runs])
        ex_cpu = scale * median([r.cpu for r in exact_runs])
        ap_wall, ap_cpu = median([r.wall for r in approx_runs]), median([r.cpu for r in approx_runs])
        build = median([r.parts["build"] for r in approx_runs])
        searching = median([r.parts["search"] for r in approx_runs])
        recalls = {}
        for name in ("x->y", "y->x"):
            found = approx_runs[-1].ids[name]
            recalls[name] = recall_at(found if rows is None else found[rows], exact_runs[-1].ids[name], K)
        print(
            f"{size:>9,} {'~' if sampled else ' '}{ex_wall:>8,.1f} ({ex_cpu:>6,.0f}) {ap_wall:>7,.1f} "
            f"({ap_cpu:>6,.0f}) {build:>6.1f}/{searching:<6.1f} {ex_wall / ap_wall:>7.1f}x "
            f"({ex_cpu / ap_cpu:>4.1f}x) {recalls['x->y']:>14.3f} {recalls['y->x']:>6.3f} "
            f"{approx_runs[-1].index_bytes / 2**20:>9,.0f} {(x.nbytes + y.nbytes) / 2**20:>8,.0f} "
            f"{peaks['exact']:>14,.0f} {peaks['approx']:>7,.0f}",
            flush=True,
        )
        notes.append(data_check(size, x, y, pairs, rows, exact_runs[-1].ids["x->y"]))
        if previous:
            p_size, p_ex, p_ap = previous
            notes.append(
                f"S {p_size:,} -> {size:,} ({size / p_size:.0f}x): exact time x{ex_wall / p_ex:.0f}, "
                f"approximate x{ap_wall / p_ap:.1f} (wall)"
            )
        previous = (size, ex_wall, ap_wall)
        if size == 100_000:
            notes.append(target(recalls, ex_wall / ap_wall, ex_cpu / ap_cpu))
        del x, y
    print(
        f"~ exact extrapolated linearly from {args.exact_sample:,} random queries per direction "
        f"(S / {args.exact_sample:,} x their time); recall@4 on those queries"
    )
    print(
        f"times: medians of {args.repeats} runs for S <= {args.exact_above:,}, one run above; "
        "build = train + add, both directions"
    )
    for note in notes:
        print(note)
    print(f"load average at end {os.getloadavg()[0]:.1f}")


def data_check(
    size: int, x: np.ndarray, y: np.ndarray, pairs: np.ndarray, rows: np.ndarray | None, exact_ids: np.ndarray
) -> str:
    """How hard mining is on the stand-in: true pairs ranked first by exact search from x, and cosines."""
    queries = np.arange(size) if rows is None else rows
    partner = np.full(size, -1)
    partner[pairs[:, 0]] = pairs[:, 1]
    has = partner[queries] >= 0
    first = float((exact_ids[has, 0] == partner[queries][has]).mean())
    cosine = np.einsum("nd,nd->n", x[pairs[:5000, 0]], y[pairs[:5000, 1]])
    return (
        f"data S={size:,}: exact x->y ranks the true translation first for {first:.1%} of "
        f"{int(has.sum()):,} pairs; true-pair cosine median {np.median(cosine):.2f}"
    )


def target(recalls: dict[str, float], wall: float, cpu: float) -> str:
    met = min(recalls.values()) >= 0.95 and wall >= 5
    return (
        f"target (issue 17) at 100k: recall@4 >= 0.95 both ways ({recalls['x->y']:.3f}, "
        f"{recalls['y->x']:.3f}) and >= 5x faster ({wall:.1f}x wall, {cpu:.1f}x cpu): "
        f"{'met' if met else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
