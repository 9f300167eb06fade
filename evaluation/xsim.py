"""The similarity-search error (Schwenk & Douze 2017, Algorithm 1), for every ordered language pair.

For languages p and q with S aligned sentences each (row i of p translates row
i of q): search every sentence of p among all S sentences of q; an error is
counted when the nearest one is not its translation. The one routine behind
the dev error during training and the test error of `interlingua evaluate`:

    results = search_pairs(embeddings, metric="cosine", shards=4, k=5, executor=...)
    metrics = pair_metrics(results, texts, metric="cosine", margin_k=4)
    matrix  = error_matrix(embeddings)          # in-process, {(p, q): error}

`search_pairs` cuts each language's candidates into shards and searches each
with faiss (`evaluation.search`); an executor runs the shard searches, in this
process (`LocalExecutor`) or as Ray tasks (`orchestration.cluster.RayExecutor`),
and the per-shard top-k lists are merged exactly. Plain functions over arrays.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from evaluation.metrics import margin_choice, margin_error, retrieval_metrics
from evaluation.search import count_better, merge, normalized, pair_scores, recall_at, search_shard

Pair = tuple[str, str]


class Executor(Protocol):
    """Where shard searches run: `put` stores an array once for many tasks, `map` runs the tasks."""

    def put(self, array: np.ndarray) -> Any: ...

    def map(self, fn: Callable[..., Any], calls: list[tuple]) -> list[Any]: ...


class LocalExecutor:
    """Every shard search in this process, one after another."""

    def put(self, array: np.ndarray) -> np.ndarray:
        return array

    def map(self, fn: Callable[..., Any], calls: list[tuple]) -> list[Any]:
        return [fn(*args) for args in calls]


@dataclass
class PairResult:
    """The search of one ordered pair: each query's top-k (best first) and, after an exact search,
    how many candidates beat its true translation (1 + that is its rank)."""

    scores: np.ndarray  # (Q, k)
    ids: np.ndarray  # (Q, k) rows of the searched language
    better: np.ndarray | None  # (Q,), None after an approximate search


def search_shard_task(queries, shard, offset: int, k: int, metric: str, reference, index: str = "flat"):
    """One shard search: its top-k for every query, and how many shard rows beat the true pair
    (exact search only: with an approximate index the rank is not computed)."""
    scores, ids = search_shard(queries, shard, k, metric, offset, index)
    better = count_better(queries, shard, reference, metric) if index == "flat" else None
    return scores, ids, better


def search_pairs(
    embeddings: dict[str, np.ndarray], *, metric: str = "cosine", shards: int = 1, k: int = 1,
    index: str = "flat", queries: int | None = None, executor: Executor | None = None,
) -> dict[Pair, PairResult]:
    """Top-k and true ranks of every ordered pair of aligned embeddings {lang: (S, D)}, the candidates
    in `shards` shards each (the first `queries` rows of each language as queries when given)."""
    shapes = {lang: emb.shape for lang, emb in embeddings.items()}
    if len({shape[0] for shape in shapes.values()}) != 1:
        raise ValueError(f"aligned embeddings differ in size: {shapes}")
    if any(len(shape) != 2 for shape in shapes.values()) or len({shape[1] for shape in shapes.values()}) != 1:
        raise ValueError(f"embeddings must be (S, D) with the same dimensions D: {shapes}")
    if len(embeddings) < 2:
        raise ValueError(f"need at least two languages, got {list(embeddings)}")
    executor = executor or LocalExecutor()
    prepared = {lang: normalized(emb, metric) for lang, emb in embeddings.items()}
    total = next(iter(shapes.values()))[0]
    size = -(-total // shards)
    shard_refs = {lang: [(s, executor.put(emb[s:s + size])) for s in range(0, total, size)]
                  for lang, emb in prepared.items()}
    nq = queries or total
    query_refs = {lang: executor.put(emb[:nq]) for lang, emb in prepared.items()}
    results = {}
    for p, q in permutations(prepared, 2):
        reference = pair_scores(prepared[p][:nq], prepared[q][:nq], metric)
        parts = executor.map(search_shard_task, [(query_refs[p], ref, offset, k, metric, reference, index)
                                                 for offset, ref in shard_refs[q]])
        scores, ids = merge([(s, i) for s, i, _ in parts], nq, k, metric)
        better = None if index != "flat" else sum(c for _, _, c in parts)
        results[(p, q)] = PairResult(scores, ids, better)
    return results


def pair_metrics(results: dict[Pair, PairResult], texts: dict[str, Sequence[str]] | None, *, metric: str,
                 margin_k: int) -> dict[Pair, dict[str, float]]:
    """Every pair's metrics (`evaluation.metrics`); the ratio-margin error needs cosine and the
    backward search of the same pair."""
    out = {}
    for (p, q), r in results.items():
        m = retrieval_metrics(r.ids, r.better, texts[q] if texts else None)
        if metric == "cosine":
            backward = results[(q, p)].scores[:, :margin_k].mean(axis=1)  # each q sentence's top-k mean in p
            m["margin_error"] = margin_error(margin_choice(r.scores[:, :margin_k], r.ids[:, :margin_k], backward))
        out[(p, q)] = m
    return out


def approximate_recall(approximate: dict[Pair, PairResult], exact: dict[Pair, PairResult]) -> dict[Pair, dict]:
    """How much an approximate search loses against exact search of the same queries: recall@1, @5."""
    out = {}
    for pair, e in exact.items():
        found = approximate[pair].ids[: len(e.ids)]
        out[pair] = {"recall_at_1": recall_at(found, e.ids, 1), "recall_at_5": recall_at(found, e.ids, 5)}
    return out


def error_matrix(embeddings: dict[str, np.ndarray], metric: str = "cosine") -> dict[Pair, float]:
    """The error of every ordered pair (p, q), p != q, of aligned embeddings {lang: (S, D)}, in-process."""
    results = search_pairs(embeddings, metric=metric, k=1)
    return {pair: float(np.mean(r.ids[:, 0] != np.arange(len(r.ids)))) for pair, r in results.items()}


def average_error(matrix: dict[Pair, float], languages: list[str] | None = None) -> float:
    """Mean error over the ordered pairs among `languages` (all pairs when None)."""
    pairs = [(p, q) for (p, q) in matrix if languages is None or (p in languages and q in languages)]
    if not pairs:
        raise ValueError(f"no language pairs among {languages}")
    return float(np.mean([matrix[pair] for pair in pairs]))
