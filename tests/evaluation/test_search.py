"""Sharded search equals unsharded search exactly; ranks and metrics against brute force."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.search import count_better, merge, normalized, pair_scores, recall_at, search, search_shard


def brute_force(queries, candidates, k, metric):
    if metric == "cosine":
        q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
        c = candidates / np.linalg.norm(candidates, axis=1, keepdims=True)
        scores = q @ c.T
    elif metric == "ip":
        scores = queries @ candidates.T
    elif metric == "l2":
        scores = -((queries[:, None, :] - candidates[None]) ** 2).sum(-1)
    else:
        scores = -np.abs(queries[:, None, :] - candidates[None]).sum(-1)
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


@pytest.mark.parametrize("metric", ["cosine", "ip", "l2", "l1"])
@pytest.mark.parametrize("shard_size", [7, 64, 1000])
def test_sharded_equals_unsharded_and_brute_force(metric, shard_size):
    rng = np.random.default_rng(0)
    queries = rng.normal(size=(50, 12)).astype(np.float32)
    candidates = rng.normal(size=(300, 12)).astype(np.float32)
    scores, ids = search(queries, candidates, 5, metric)
    s_scores, s_ids = search(queries, candidates, 5, metric, shard_size=shard_size)
    np.testing.assert_array_equal(s_ids, ids)
    np.testing.assert_allclose(s_scores, scores, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ids, brute_force(queries, candidates, 5, metric))


def test_shards_smaller_than_k_and_global_ids():
    rng = np.random.default_rng(1)
    q = normalized(rng.normal(size=(4, 3)), "cosine")
    c = normalized(rng.normal(size=(10, 3)), "cosine")
    parts = [search_shard(q, c[s : s + 2], 5, "cosine", s) for s in range(0, 10, 2)]
    assert parts[1][1].min() >= 2  # ids are offset into the whole candidate set
    scores, ids = merge(parts, 4, 5, "cosine")
    np.testing.assert_array_equal(ids, search(q, c, 5, "cosine")[1])


@pytest.mark.parametrize("metric", ["cosine", "l2", "l1"])
def test_count_better_gives_the_true_rank(metric):
    rng = np.random.default_rng(2)
    q = normalized(rng.normal(size=(40, 8)), metric)
    c = normalized(rng.normal(size=(40, 8)), metric)
    reference = pair_scores(q, c, metric)
    counts = sum(count_better(q, c[s : s + 9], reference, metric, block=16) for s in range(0, 40, 9))
    order = brute_force(q, c, 40, metric)
    expected = np.array([list(row).index(i) for i, row in enumerate(order)])
    np.testing.assert_array_equal(counts, expected)


@pytest.mark.parametrize("index", ["hnsw", "ivf"])
def test_approximate_indexes_report_their_recall(index):
    rng = np.random.default_rng(3)
    candidates = normalized(rng.normal(size=(4000, 32)), "cosine")
    queries = normalized(candidates[:300] + 0.3 * rng.normal(size=(300, 32)).astype(np.float32), "cosine")
    exact = search_shard(queries, candidates, 5, "cosine")[1]
    approx = merge(
        [search_shard(queries, candidates[s : s + 2000], 5, "cosine", s, index) for s in (0, 2000)], 300, 5, "cosine"
    )[1]
    assert recall_at(approx, exact, 1) > 0.7  # isotropic random vectors: the hard case for IVF
    assert recall_at(exact, exact, 5) == 1.0
    assert recall_at(approx[:, ::-1], exact, 1) < 1.0  # a wrong order is seen
    with pytest.raises(ValueError, match="not l1"):
        search_shard(queries, candidates, 5, "l1", 0, index)
