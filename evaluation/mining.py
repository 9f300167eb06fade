"""Margin-based bitext mining (Artetxe & Schwenk 2019, LASER's mine_bitexts): plain functions over arrays.

    fwd = Neighbours(*search(x, y, k))             # each x's k nearest y, best first
    bwd = Neighbours(*search(y, x, k))
    pairs = mine(fwd, bwd, mode="intersection")    # candidate pairs with their ratio-margin scores
    kept, dropped = filter_pairs(pairs, x_text, y_text, ...)
    threshold, curve = calibrate(pairs.score, is_gold)

The ratio margin of a pair (x, y) is cos(x, y) over the mean of x's k nearest
cosines and y's k nearest cosines, both from the same kNN lists. Modes:
forward (each x's best y by margin), backward (each y's best x), intersection
(pairs both directions agree on) and max (both directions' pairs, best first,
each sentence used once).
"""

from __future__ import annotations

from dataclasses import dataclass

import faiss
import numpy as np

MODES = ("forward", "backward", "intersection", "max")
# Queries per IVF-PQ search call: one call holds the lookup tables of all its queries (~20 KB each at
# 256-d, 20 GB for 1M queries); blocks of 1,024 ran fastest in benchmarks/mine.py.
QUERY_BLOCK = 1024


@dataclass
class Neighbours:
    """The k nearest candidates of every query, best first: cosines (Q, k) and candidate rows (Q, k)."""

    scores: np.ndarray
    ids: np.ndarray

    @property
    def mean(self) -> np.ndarray:
        """(Q,) mean cosine of each query's k nearest (the neighbourhood term of the margin)."""
        return self.scores.mean(axis=1)


@dataclass
class Pairs:
    """Mined candidate pairs: rows of x and y, margin score, and each side's rank of the other (0 = nearest,
    -1 = not among its k nearest)."""

    src: np.ndarray  # (P,) rows of x
    trg: np.ndarray  # (P,) rows of y
    score: np.ndarray  # (P,) ratio margin
    fwd_rank: np.ndarray  # (P,) rank of y among x's neighbours
    bwd_rank: np.ndarray  # (P,) rank of x among y's neighbours

    def __len__(self) -> int:
        return len(self.src)

    def take(self, keep: np.ndarray) -> Pairs:
        return Pairs(self.src[keep], self.trg[keep], self.score[keep], self.fwd_rank[keep], self.bwd_rank[keep])


def margin(fwd: Neighbours, bwd: Neighbours) -> np.ndarray:
    """(X, k) ratio margin of each x's k candidates: cos / ((mean_k(x) + mean_k(y)) / 2). ValueError when a
    neighbourhood mean is not positive: the ratio is then undefined (it used to be divided by 1e-9)."""
    denominator = (fwd.mean[:, None] + bwd.mean[fwd.ids]) / 2  # (X, k)
    undefined = int((denominator <= 0).any(axis=1).sum())
    if undefined:
        raise ValueError(
            f"the margin is undefined for {undefined} of {len(denominator)} sentences: the mean "
            f"cosine of their {fwd.scores.shape[1]} nearest neighbours is not positive (k reaches "
            "unrelated sentences)"
        )
    return fwd.scores / denominator


def _rank_of(neighbours: Neighbours, rows: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Rank of `wanted[i]` among the neighbours of `rows[i]` (-1 when absent)."""
    hits = neighbours.ids[rows] == wanted[:, None]  # (P, k)
    return np.where(hits.any(axis=1), hits.argmax(axis=1), -1)


def _best(fwd: Neighbours, bwd: Neighbours) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each query's best candidate by margin: (query rows, candidate rows, scores)."""
    scores = margin(fwd, bwd)  # (Q, k)
    best = scores.argmax(axis=1)
    rows = np.arange(len(scores))
    return rows, fwd.ids[rows, best], scores[rows, best]


def mine(fwd: Neighbours, bwd: Neighbours, mode: str = "intersection") -> Pairs:
    """Candidate pairs of x (the queries of `fwd`) and y (the queries of `bwd`), best score first."""
    if mode not in MODES:
        raise ValueError(f"unknown mining mode {mode!r}; use one of {', '.join(MODES)}")
    xs, ys, s_fwd = _best(fwd, bwd)
    ys_b, xs_b, s_bwd = _best(bwd, fwd)
    if mode == "forward":
        src, trg, score = xs, ys, s_fwd
    elif mode == "backward":
        src, trg, score = xs_b, ys_b, s_bwd
    elif mode == "intersection":
        agree = xs_b[ys] == xs  # x's best y has x as its best
        src, trg, score = xs[agree], ys[agree], s_fwd[agree]
    else:
        src, trg, score = _greedy_max(
            np.concatenate([xs, xs_b]), np.concatenate([ys, ys_b]), np.concatenate([s_fwd, s_bwd])
        )
    order = np.argsort(-score, kind="stable")
    src, trg, score = src[order], trg[order], score[order]
    return Pairs(src, trg, score, _rank_of(fwd, src, trg), _rank_of(bwd, trg, src))


def _greedy_max(src: np.ndarray, trg: np.ndarray, score: np.ndarray) -> tuple[np.ndarray, ...]:
    """Best pairs first; a pair is kept when neither of its sentences is in a kept pair yet."""
    used_src, used_trg, keep = set(), set(), []
    for i in np.argsort(-score, kind="stable").tolist():
        s, t = int(src[i]), int(trg[i])
        if s not in used_src and t not in used_trg:
            used_src.add(s)
            used_trg.add(t)
            keep.append(i)
    keep_arr = np.array(keep, dtype=np.int64)
    return src[keep_arr], trg[keep_arr], score[keep_arr]


def hub_counts(neighbours: Neighbours, size: int) -> np.ndarray:
    """(size,) how often each candidate is the nearest neighbour of a query."""
    return np.bincount(neighbours.ids[:, 0][neighbours.ids[:, 0] >= 0], minlength=size)


def calibrate(
    scores: np.ndarray, gold: np.ndarray, total_gold: int | None = None
) -> tuple[float, dict[str, np.ndarray]]:
    """The threshold that maximizes F1 of `scores >= threshold` against `gold` (bool per pair), and the
    curve (thresholds, precision, recall, f1). `total_gold`: the gold pairs that exist, mined or not."""
    if len(scores) == 0:
        raise ValueError("no candidate pairs to calibrate a threshold on")
    order = np.argsort(-scores, kind="stable")
    s, g = scores[order], gold[order].astype(np.float64)
    true_pos = np.cumsum(g)
    kept = np.arange(1, len(s) + 1)
    total = total_gold if total_gold is not None else int(g.sum())
    precision = true_pos / kept
    recall = true_pos / max(total, 1)
    f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
    last = np.r_[s[1:] != s[:-1], True]  # a threshold keeps every pair of equal score
    best = int(np.flatnonzero(last)[np.argmax(f1[last])])
    return float(s[best]), {"threshold": s[last], "precision": precision[last], "recall": recall[last], "f1": f1[last]}


def precision_recall_f1(kept_gold: int, kept: int, total_gold: int) -> dict[str, float]:
    """P, R and F1 of a kept set holding `kept_gold` true pairs out of `kept`, with `total_gold` true pairs."""
    p = kept_gold / kept if kept else 0.0
    r = kept_gold / total_gold if total_gold else 0.0
    return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0}


def approximate_index(
    candidates: np.ndarray,
    *,
    lists: int | None = None,
    pq_bytes: int | None = None,
    nprobe: int = 24,
    refine: bool = True,
    sample: int | None = None,
    seed: int = 0,
    k_factor: int = 4,
) -> faiss.Index:
    """An IVF-PQ inner-product index over normalized `candidates` (N, D), D even.

    `lists` inverted lists (default 4 sqrt(N)), each vector stored as a fast-scan PQ code of `pq_bytes`
    bytes (4-bit sub-quantizers, default D / 2: one per dimension) of its residual from its list's
    centre; a query scans its `nprobe` nearest lists. Trained on `sample` seeded rows (default 20 per
    list, at least 1024). With `refine`, the k * `k_factor` best by code are re-ranked exactly
    (IndexRefineFlat, which keeps a float32 copy of the candidates). Search it in blocks of ~1,000
    queries: one search call holds the lookup tables of all its queries (~20 KB each at 256-d), and
    blocks of 1,024 ran faster than larger ones.
    benchmarks/mine.py measures these defaults. Raises ValueError for an odd D.
    """
    n, dim = candidates.shape
    if dim % 2:
        raise ValueError(f"approximate_index needs an even dimension for its 4-bit PQ codes, got {dim}")
    lists = lists or max(1, min(int(4 * np.sqrt(n)), n // 39))  # faiss wants >= 39 training points per list
    # Why 4-bit codes of one dimension each: sentence neighbours crowd (for one query in ten of the
    # benchmark's stand-in, the 4th and the 64th nearest lie within 0.02 cosine), so coarser codes (the
    # old 8-bit PQ of 8 dimensions) rank them too poorly for a short re-ranked list, and 8-bit codes
    # are scanned without fast-scan's SIMD lookups.
    subquantizers = 2 * (pq_bytes or dim // 2)
    while dim % subquantizers:
        subquantizers -= 2
    quantizer = faiss.IndexFlatIP(dim)
    ivf = faiss.IndexIVFPQFastScan(quantizer, dim, lists, subquantizers, 4, faiss.METRIC_INNER_PRODUCT)
    ivf.by_residual = True  # off by default in faiss; a residual has about half a vector's energy to code
    ivf.cp.spherical = True  # unit-norm list centres for unit-norm vectors: +0.003 recall at nprobe 24
    ivf.cp.min_points_per_centroid = 16  # k-means warns below this many training rows per list
    # 16 levels of one dimension settle fast: 10 k-means iterations (not 25) on 1,024 rows (not 4,096)
    # gave the same recall in a quarter of the PQ training time
    ivf.pq.cp.niter, ivf.pq.cp.max_points_per_centroid = 10, 64
    rows = np.random.default_rng(seed).permutation(n)[: sample or max(20 * lists, 1024)]
    ivf.train(np.ascontiguousarray(candidates[np.sort(rows)]))
    ivf.nprobe = nprobe
    index: faiss.Index = ivf
    if refine:
        index = faiss.IndexRefineFlat(ivf)
        index.k_factor = k_factor
    index.add(candidates)
    return index


def knn(
    queries: np.ndarray,
    candidates: np.ndarray,
    k: int,
    *,
    index: str = "flat",
    nprobe: int = 16,
    shards: int = 1,
    executor=None,
) -> Neighbours:
    """The k nearest candidates (cosine) of every query: exact search in `shards` candidate shards run by
    `executor` (`evaluation.xsim.LocalExecutor` when None) and merged exactly, or an approximate IVF-PQ
    index (`index="ivfpq"`). Both arrays are L2-normalized here (copies)."""
    from evaluation.search import merge, normalized, search_shard
    from evaluation.xsim import LocalExecutor

    if not 1 <= k <= len(candidates):  # never clamped: a caller's k is its margin's neighbourhood
        raise ValueError(f"k={k} nearest neighbours of {len(candidates)} candidates; k must be 1 to {len(candidates)}")
    q, c = normalized(queries, "cosine"), normalized(candidates, "cosine")
    if index == "ivfpq":
        approximate = approximate_index(c, nprobe=nprobe)
        parts = [approximate.search(q[s : s + QUERY_BLOCK], k) for s in range(0, len(q), QUERY_BLOCK)]
        return Neighbours(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    if index != "flat":
        raise ValueError(f"unknown index {index!r}; use flat or ivfpq")
    executor = executor or LocalExecutor()
    size = -(-len(c) // shards)
    query_ref = executor.put(q)
    parts = executor.map(
        search_shard, [(query_ref, executor.put(c[s : s + size]), k, "cosine", s) for s in range(0, len(c), size)]
    )
    return Neighbours(*merge(parts, len(q), k, "cosine"))


def filter_pairs(
    pairs: Pairs,
    src_texts: list[str],
    trg_texts: list[str],
    *,
    src_hubs: np.ndarray,
    trg_hubs: np.ndarray,
    max_hub: int,
    max_length_ratio: float,
    min_letter_share: float,
    max_score: float | None,
) -> tuple[Pairs, dict[str, int]]:
    """The pairs without the known garbage, and how many each reason dropped (first reason wins):
    identical strings, mostly digits or punctuation, length-ratio outliers, hubs (a sentence that is
    the nearest neighbour of more than `max_hub` queries), scores above `max_score`."""
    keep = np.ones(len(pairs), dtype=bool)
    dropped: dict[str, int] = {}
    reasons = {
        "identical": lambda s, t, i: s == t,
        "few_letters": lambda s, t, i: min(_letter_share(s), _letter_share(t)) < min_letter_share,
        "length_ratio": lambda s, t, i: max(len(s), len(t)) > max_length_ratio * max(min(len(s), len(t)), 1),
        "hub": lambda s, t, i: src_hubs[pairs.src[i]] > max_hub or trg_hubs[pairs.trg[i]] > max_hub,
        "score_cap": lambda s, t, i: max_score is not None and pairs.score[i] > max_score,
    }
    for i in range(len(pairs)):
        s, t = src_texts[pairs.src[i]], trg_texts[pairs.trg[i]]
        reason = next((name for name, test in reasons.items() if test(s, t, i)), None)
        if reason:
            keep[i] = False
            dropped[reason] = dropped.get(reason, 0) + 1
    return pairs.take(keep), dropped


def _letter_share(text: str) -> float:
    chars = [c for c in text if not c.isspace()]
    return sum(c.isalpha() for c in chars) / len(chars) if chars else 0.0
