"""The paper's similarity-search error (Schwenk & Douze 2017, Algorithm 1).

For languages p and q with S aligned sentences each: search every sentence of
p among all S sentences of q; an error is counted when the nearest one is not
its translation (the same row). `error_matrix` does it for every ordered pair.
Plain functions over arrays; exact faiss search on L2-normalized vectors (cosine).
"""
from __future__ import annotations

from itertools import permutations

import faiss
import numpy as np


def nearest(queries: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Row of the most cosine-similar candidate for each query: (Q, D), (S, D) -> (Q,)."""
    if queries.ndim != 2 or candidates.ndim != 2 or queries.shape[1] != candidates.shape[1]:
        raise ValueError(f"expected (Q, D) and (S, D), got {queries.shape} and {candidates.shape}")
    q = np.ascontiguousarray(queries, dtype=np.float32).copy()
    c = np.ascontiguousarray(candidates, dtype=np.float32).copy()
    faiss.normalize_L2(q)
    faiss.normalize_L2(c)
    index = faiss.IndexFlatIP(c.shape[1])
    index.add(c)
    _, rows = index.search(q, 1)
    return rows[:, 0]


def similarity_error(source: np.ndarray, target: np.ndarray) -> float:
    """Fraction of rows of `source` whose nearest row of `target` is not the aligned one."""
    if len(source) != len(target):
        raise ValueError(f"aligned sets differ in size: {len(source)} vs {len(target)}")
    found = nearest(source, target)
    return float(np.mean(found != np.arange(len(source))))


def error_matrix(embeddings: dict[str, np.ndarray]) -> dict[tuple[str, str], float]:
    """The error of every ordered pair (p, q), p != q, of aligned embeddings {lang: (S, D)}."""
    return {(p, q): similarity_error(embeddings[p], embeddings[q]) for p, q in permutations(embeddings, 2)}


def average_error(matrix: dict[tuple[str, str], float], languages: list[str] | None = None) -> float:
    """Mean error over the ordered pairs among `languages` (all pairs when None)."""
    pairs = [(p, q) for (p, q) in matrix if languages is None or (p in languages and q in languages)]
    if not pairs:
        raise ValueError(f"no language pairs among {languages}")
    return float(np.mean([matrix[pair] for pair in pairs]))
