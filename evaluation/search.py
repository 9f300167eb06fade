"""Exact k-nearest-neighbour search in candidate shards, merged exactly (faiss `ResultHeap`).

Plain functions over arrays, in the manner of faiss.contrib.exhaustive_search:
a shard is searched on its own (`search_shard`, what a Ray task runs), the
per-shard top-k lists are merged into the global top-k (`merge`), so a
sharded search returns what one search over all candidates returns, with
memory bounded by the shard, never S x S.

Metrics: cosine (inner product of L2-normalized vectors, the default), ip,
l2 and l1. Scores are "higher is better" for cosine/ip and "lower is better"
for l2/l1, as faiss returns them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import faiss
import numpy as np

Metric = Literal["cosine", "ip", "l2", "l1"]
METRICS: tuple[str, ...] = ("cosine", "ip", "l2", "l1")


def higher_is_better(metric: str) -> bool:
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; use one of {', '.join(METRICS)}")
    return metric in ("cosine", "ip")


def normalized(vectors: np.ndarray, metric: str) -> np.ndarray:
    """The vectors as the index takes them: float32, C-contiguous, L2-normalized for cosine (a copy;
    the input is left alone)."""
    if vectors.ndim != 2:
        raise ValueError(f"expected a (N, D) array, got shape {vectors.shape}")
    out = np.array(vectors, dtype=np.float32, order="C", copy=True)
    if metric == "cosine":
        faiss.normalize_L2(out)
    higher_is_better(metric)
    return out


INDEXES: tuple[str, ...] = ("flat", "hnsw", "ivf")


def _index(dim: int, metric: str, kind: str = "flat", size: int = 0) -> faiss.Index:
    """An exact flat index, or an approximate one (HNSW graph, or IVF with ~4 sqrt(n) lists)."""
    faiss_metric = {
        "cosine": faiss.METRIC_INNER_PRODUCT,
        "ip": faiss.METRIC_INNER_PRODUCT,
        "l2": faiss.METRIC_L2,
        "l1": faiss.METRIC_L1,
    }[metric]
    if kind == "flat":
        return faiss.IndexFlat(dim, faiss_metric)
    if metric == "l1":
        raise ValueError("approximate indexes support cosine, ip and l2, not l1")
    if kind == "hnsw":
        hnsw = faiss.IndexHNSWFlat(dim, 32, faiss_metric)
        hnsw.hnsw.efSearch = 128
        return hnsw
    if kind == "ivf":
        lists = max(1, min(int(4 * np.sqrt(size)), size // 39))  # faiss wants >= 39 points per list
        ivf = faiss.IndexIVFFlat(faiss.IndexFlat(dim, faiss_metric), dim, lists, faiss_metric)
        ivf.nprobe = max(1, lists // 4)
        return ivf
    raise ValueError(f"unknown index {kind!r}; use one of {', '.join(INDEXES)}")


def search_shard(
    queries: np.ndarray, shard: np.ndarray, k: int, metric: str, offset: int = 0, index: str = "flat"
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of every query among one shard of normalized candidates; ids are global (offset + row)."""
    if queries.shape[1] != shard.shape[1]:
        raise ValueError(f"queries have {queries.shape[1]} dimensions, candidates {shard.shape[1]}")
    built = _index(shard.shape[1], metric, index, len(shard))
    if not built.is_trained:
        built.train(shard)
    built.add(shard)
    scores, ids = built.search(queries, min(k, len(shard)))
    return scores, np.where(ids >= 0, ids + offset, -1)


def recall_at(approximate_ids: np.ndarray, exact_ids: np.ndarray, k: int = 1) -> float:
    """Share of the exact top-k found in the approximate top-k (k = 1: the same nearest)."""
    found = [len(set(a[:k]) & set(e[:k])) for a, e in zip(approximate_ids, exact_ids)]
    return float(np.sum(found) / (k * len(exact_ids)))


def merge(parts: Iterable[tuple[np.ndarray, np.ndarray]], num_queries: int, k: int, metric: str):
    """The exact global top-k from per-shard top-k lists: (scores (Q, k), ids (Q, k)), best first."""
    heap = faiss.ResultHeap(num_queries, k, keep_max=higher_is_better(metric))
    for scores, ids in parts:
        heap.add_result(scores, ids)
    heap.finalize()
    return heap.D, heap.I


def pair_scores(a: np.ndarray, b: np.ndarray, metric: str) -> np.ndarray:
    """Score of each row of a with the same row of b (normalized vectors): (N,)."""
    if metric in ("cosine", "ip"):
        return np.einsum("nd,nd->n", a, b)
    if metric == "l2":
        return np.einsum("nd,nd->n", a - b, a - b)
    return np.abs(a - b).sum(axis=1)


def count_better(
    queries: np.ndarray, shard: np.ndarray, reference: np.ndarray, metric: str, block: int | None = None
) -> np.ndarray:
    """For each query, how many rows of the shard score strictly better than `reference` (Q,).

    Summed over shards, 1 + this is the rank of the true translation. Computed
    in blocks of queries (by default 4096, fewer for large shards: at most 2^25
    scores, 128 MiB, at a time), so memory stays block x shard.
    """
    block = block or max(1, min(4096, (1 << 25) // max(len(shard), 1)))
    counts = np.zeros(len(queries), dtype=np.int64)
    # the true pair's own score, computed another way, may differ in the last bits: a tolerance
    # keeps it from counting as better than itself (near-ties count as not better)
    tolerance = 1e-5 * np.maximum(np.abs(reference), 1.0)
    sign = 1.0 if higher_is_better(metric) else -1.0
    for start in range(0, len(queries), block):
        q = queries[start : start + block]
        if metric in ("cosine", "ip"):
            scores = q @ shard.T  # (b, n)
        elif metric == "l2":
            scores = faiss.pairwise_distances(q, shard, faiss.METRIC_L2)
        else:
            scores = faiss.pairwise_distances(q, shard, faiss.METRIC_L1)
        margin = sign * (scores - reference[start : start + block, None])
        counts[start : start + block] = (margin > tolerance[start : start + block, None]).sum(axis=1)
    return counts


def search(
    queries: np.ndarray, candidates: np.ndarray, k: int, metric: str = "cosine", shard_size: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Single-process search over candidate shards of `shard_size` rows (all at once when None)."""
    size = shard_size or len(candidates)
    return search_blocks(queries, ((s, candidates[s : s + size]) for s in range(0, len(candidates), size)), k, metric)


def search_blocks(
    queries: np.ndarray, blocks: Iterable[tuple[int, np.ndarray]], k: int, metric: str = "cosine"
) -> tuple[np.ndarray, np.ndarray]:
    """Single-process search over candidates that come block by block, (first row, (n, D) rows), each
    normalized as it comes: only one block is held at a time. (scores (Q, k), ids (Q, k))."""
    q = normalized(queries, metric)
    parts = (search_shard(q, normalized(block, metric), k, metric, start) for start, block in blocks)
    return merge(parts, len(q), k, metric)
