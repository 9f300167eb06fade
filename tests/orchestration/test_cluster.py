"""Ray as the search executor: shard searches as Ray tasks give what the in-process search gives."""
from __future__ import annotations

import numpy as np

from evaluation.search import search
from evaluation.xsim import LocalExecutor, search_pairs
from orchestration.cluster import RayExecutor


def test_ray_sharded_search_equals_single_process(local_ray):
    rng = np.random.default_rng(0)
    base = rng.normal(size=(120, 16)).astype(np.float32)
    emb = {"en": base, "fr": base + rng.normal(scale=1.0, size=base.shape).astype(np.float32)}
    for metric in ("cosine", "l2"):
        local = search_pairs(emb, metric=metric, shards=1, k=5, executor=LocalExecutor())
        on_ray = search_pairs(emb, metric=metric, shards=7, k=5, executor=RayExecutor())
        for pair in local:
            np.testing.assert_array_equal(on_ray[pair].ids, local[pair].ids)
            np.testing.assert_array_equal(on_ray[pair].better, local[pair].better)
        np.testing.assert_array_equal(local[("fr", "en")].ids, search(emb["fr"], emb["en"], 5, metric)[1])
