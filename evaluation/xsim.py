"""The similarity-search error (Schwenk & Douze 2017, Algorithm 1), for every ordered language pair.

For languages p and q with S aligned sentences each (row i of p translates row
i of q): search every sentence of p among all S sentences of q; an error is
counted when the nearest one is not its translation. The one routine behind
the dev error during training and the test error of `interlingua evaluate`:

    results = search_pairs(embeddings, metric="cosine", shards=4, k=5, executor=...)
    metrics = pair_metrics(results, texts, metric="cosine", margin_k=4)
    matrix  = error_matrix(embeddings)          # in-process, {(p, q): error}

`embeddings` are in-memory arrays {lang: (S, D)} or embeddings on disk
(`evaluation.store.StoredEmbeddings`). Each task searches one block of
`query_block` queries against one of `shards` candidate shards, reading and
normalizing only those rows; an executor runs the tasks, in this process
(`LocalExecutor`) or as Ray tasks (`orchestration.adapters.cluster.RayExecutor`), and
the per-shard top-k lists are merged exactly, block by block. With
`results_dir` the merged top-k go to disk as they come, so the caller holds a
block of queries at a time, never a split. Plain functions over arrays.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import permutations
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from evaluation.metrics import margin_choice, metrics_from_counts, retrieval_counts
from evaluation.npy import NpyFile, NpyWriter
from evaluation.search import count_better, merge, normalized, pair_scores, recall_at, search_shard
from evaluation.store import StoredEmbeddings

Pair = tuple[str, str]
QUERY_BLOCK = 16384  # queries per task: a (block, shard) score tile stays well under a GiB


class Executor(Protocol):
    """Where searches run: `put` stores a value once for many tasks, `map` runs the tasks and yields
    their results in call order."""

    def put(self, value: Any) -> Any: ...

    def map(self, fn: Callable[..., Any], calls: Iterable[tuple]) -> Iterator[Any]: ...


class LocalExecutor:
    """Every search in this process, one after another."""

    def put(self, value: Any) -> Any:
        return value

    def map(self, fn: Callable[..., Any], calls: Iterable[tuple]) -> Iterator[Any]:
        return (fn(*args) for args in calls)


class ArrayEmbeddings:
    """In-memory aligned embeddings {lang: (S, D)} read by row range, as `StoredEmbeddings` is."""

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        shapes = {lang: np.shape(emb) for lang, emb in arrays.items()}
        if len({shape[0] for shape in shapes.values()}) != 1:
            raise ValueError(f"aligned embeddings differ in size: {shapes}")
        if any(len(shape) != 2 for shape in shapes.values()) or len({shape[1] for shape in shapes.values()}) != 1:
            raise ValueError(f"embeddings must be (S, D) with the same dimensions D: {shapes}")
        self.arrays, self.languages = dict(arrays), list(arrays)

    def __len__(self) -> int:
        return len(next(iter(self.arrays.values())))

    def rows(self, lang: str, start: int, stop: int) -> np.ndarray:
        return self.arrays[lang][start:stop]


Embeddings = Mapping[str, np.ndarray] | StoredEmbeddings


@dataclass
class PairResult:
    """The search of one ordered pair: each query's top-k (best first) and, after an exact search,
    how many candidates beat its true translation (1 + that is its rank). In memory, or `NpyFile`s
    (read by row range) when searched with a `results_dir`."""

    scores: np.ndarray | NpyFile  # (Q, k)
    ids: np.ndarray | NpyFile  # (Q, k) rows of the searched language
    better: np.ndarray | NpyFile | None  # (Q,), None after an approximate search


def search_task(
    source, p: str, q: str, queries: tuple[int, int], shard: tuple[int, int], k: int, metric: str, index: str = "flat"
):
    """One block of p's queries against one shard of q's candidates: its top-k (ids global) and how
    many shard rows beat each query's true pair (exact search only; None with an approximate index)."""
    query_rows = normalized(source.rows(p, *queries), metric)  # (b, D)
    candidates = normalized(source.rows(q, *shard), metric)  # (n, D)
    scores, ids = search_shard(query_rows, candidates, k, metric, shard[0], index)
    if index != "flat":
        return scores, ids, None
    reference = pair_scores(query_rows, normalized(source.rows(q, *queries), metric), metric)  # (b,)
    return scores, ids, count_better(query_rows, candidates, reference, metric)


def search_pairs(
    embeddings: Embeddings,
    *,
    metric: str = "cosine",
    shards: int = 1,
    k: int = 1,
    index: str = "flat",
    queries: int | None = None,
    executor: Executor | None = None,
    query_block: int = QUERY_BLOCK,
    results_dir: Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[Pair, PairResult]:
    """Top-k and true ranks of every ordered pair of aligned embeddings (S rows each), the candidates
    in `shards` shards (the first `queries` rows of each language as queries when given); results in
    memory, or written to `results_dir/<p>-<q>/` block by block; `progress(n)` after each block of n
    queries searched. ValueError on misaligned input."""
    source = embeddings if isinstance(embeddings, StoredEmbeddings) else ArrayEmbeddings(embeddings)
    if len(source.languages) < 2:
        raise ValueError(f"need at least two languages, got {list(source.languages)}")
    executor = executor or LocalExecutor()
    handle = executor.put(source)
    total = len(source)
    nq = min(queries or total, total)
    size = -(-total // shards)
    shard_ranges = [(s, min(s + size, total)) for s in range(0, total, size)]
    blocks = [(a, min(a + query_block, nq)) for a in range(0, nq, query_block)]
    pairs = list(permutations(source.languages, 2))
    calls = (
        (handle, p, q, block, shard, k, metric, index) for p, q in pairs for block in blocks for shard in shard_ranges
    )
    parts = executor.map(search_task, calls)
    sinks = {
        pair: _Sink(nq, k, index == "flat", None if results_dir is None else Path(results_dir) / "-".join(pair))
        for pair in pairs
    }
    for pair in pairs:
        for start, stop in blocks:
            got = [next(parts) for _ in shard_ranges]
            scores, ids = merge([(s, i) for s, i, _ in got], stop - start, k, metric)  # (b, k) each
            better = None if index != "flat" else sum(c for _, _, c in got)
            sinks[pair].write(start, scores, ids, better)
            if progress is not None:
                progress(stop - start)
    return {pair: sink.result() for pair, sink in sinks.items()}


class _Sink:
    """Where the merged top-k of one pair go: preallocated arrays, or `.npy` files written by block."""

    def __init__(self, nq: int, k: int, exact: bool, folder: Path | None) -> None:
        shapes: dict[str, tuple[tuple[int, ...], Any]] = {"scores": ((nq, k), np.float32), "ids": ((nq, k), np.int64)}
        if exact:
            shapes["better"] = ((nq,), np.int64)
        self.arrays: dict[str, np.ndarray] = {}  # in memory, or
        self.writers: dict[str, NpyWriter] = {}  # in files
        for name, (shape, dtype) in shapes.items():
            if folder is None:
                self.arrays[name] = np.zeros(shape, dtype)
            else:
                self.writers[name] = NpyWriter(folder / f"{name}.npy", shape, dtype)

    def write(self, start: int, scores: np.ndarray, ids: np.ndarray, better: np.ndarray | None) -> None:
        for name, value in (("scores", scores), ("ids", ids), ("better", better)):
            if value is None:
                continue
            if name in self.arrays:
                self.arrays[name][start : start + len(value)] = value
            elif name in self.writers:
                self.writers[name].write(start, value)

    def result(self) -> PairResult:
        if not self.writers:
            return PairResult(self.arrays["scores"], self.arrays["ids"], self.arrays.get("better"))
        read = {name: NpyFile(writer.path) for name, writer in self.writers.items()}
        return PairResult(read["scores"], read["ids"], read.get("better"))


def pair_metrics(
    results: dict[Pair, PairResult],
    texts: Mapping[str, Sequence | np.ndarray] | None,
    *,
    metric: str,
    margin_k: int,
    block: int = QUERY_BLOCK,
) -> dict[Pair, dict[str, float]]:
    """Every pair's metrics (`evaluation.metrics`), read `block` queries at a time; `texts` {lang: (S,)}
    holds the texts or their hashes (`evaluation.store_writer.text_hashes`). The ratio-margin error needs
    cosine and the backward search of the same pair."""
    out = {}
    for (p, q), r in results.items():
        backward = _top_mean(results[(q, p)].scores, margin_k, block) if metric == "cosine" else None  # (S,)
        target_texts = None if texts is None else np.asarray(texts[q], dtype=_text_dtype(texts[q]))  # (S,)
        counts: Counter = Counter()
        for start in range(0, len(r.ids), block):
            ids, scores = r.ids[start : start + block], r.scores[start : start + block]  # (b, k)
            better = None if r.better is None else r.better[start : start + block]
            counts.update(retrieval_counts(ids, better, target_texts, offset=start))
            if backward is not None:
                chosen = margin_choice(scores[:, :margin_k], ids[:, :margin_k], backward)  # (b,)
                counts["margin_errors"] += int(np.sum(chosen != start + np.arange(len(chosen))))
        out[(p, q)] = metrics_from_counts(counts)
    return out


def _text_dtype(texts: Sequence | np.ndarray) -> Any:
    return texts.dtype if isinstance(texts, np.ndarray) else object


def _top_mean(scores: np.ndarray | NpyFile, k: int, block: int) -> np.ndarray:
    """Each row's mean of its first k scores (S,), read by block."""
    return np.concatenate([scores[s : s + block][:, :k].mean(axis=1) for s in range(0, len(scores), block)])


def approximate_recall(approximate: dict[Pair, PairResult], exact: dict[Pair, PairResult]) -> dict[Pair, dict]:
    """How much an approximate search loses against exact search of the same queries: recall@1, @5."""
    out = {}
    for pair, e in exact.items():
        found, truth = approximate[pair].ids[: len(e.ids)], e.ids[: len(e.ids)]  # (Q, k) each, read
        out[pair] = {"recall_at_1": recall_at(found, truth, 1), "recall_at_5": recall_at(found, truth, 5)}
    return out


def error_matrix(embeddings: Mapping[str, np.ndarray], metric: str = "cosine") -> dict[Pair, float]:
    """The error of every ordered pair (p, q), p != q, of aligned embeddings {lang: (S, D)}, in-process."""
    results = search_pairs(embeddings, metric=metric, k=1)
    return {pair: float(np.mean(r.ids[: len(r.ids)][:, 0] != np.arange(len(r.ids)))) for pair, r in results.items()}


def average_error(matrix: dict[Pair, float], languages: list[str] | None = None) -> float:
    """Mean error over the ordered pairs among `languages` (all pairs when None)."""
    pairs = [(p, q) for (p, q) in matrix if languages is None or (p in languages and q in languages)]
    if not pairs:
        raise ValueError(f"no language pairs among {languages}")
    return float(np.mean([matrix[pair] for pair in pairs]))
