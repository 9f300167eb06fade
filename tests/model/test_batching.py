"""Training batches: the per-epoch plans of each worker, resuming a stream, padding, token budgets."""
from __future__ import annotations

import numpy as np
import pytest

from model.batching import ParallelCorpus, batch_stream, plan_epoch, token_budget_batches
from model.training_paths import TrainingPath

LANGS = ["en", "fr", "es", "ru", "ar", "zh"]


@pytest.fixture(scope="module")
def corpus(small_dataset) -> ParallelCorpus:
    return ParallelCorpus.read(small_dataset.data_dir, "train", LANGS)


def test_plans_are_deterministic_disjoint_and_within_budget(corpus):
    paths = [TrainingPath(kind="1:1"), TrainingPath(kind="M:1", weight=0.5)]
    kwargs = dict(seed=3, epoch=0, max_tokens=400)
    assert [(s, r.tolist()) for s, r in plan_epoch(corpus, paths, **kwargs)] == [
        (s, r.tolist()) for s, r in plan_epoch(corpus, paths, **kwargs)
    ]
    shares = [plan_epoch(corpus, paths, rank=r, world=2, **kwargs) for r in (0, 1)]
    rows = [np.concatenate([b for _, b in share]) for share in shares]
    assert not set(rows[0]) & set(rows[1])
    assert len(rows[0]) + len(rows[1]) == corpus.size  # every tuple serves some path
    for signature, batch in shares[0]:
        langs = signature[0] + signature[1]
        longest = max(int(corpus.lengths[lang][batch].max()) + 1 for lang in langs)
        assert len(batch) * longest <= 400 or len(batch) == 1
        assert all(corpus.lengths[lang][batch].min() > 0 for lang in langs)
    other_epoch = plan_epoch(corpus, paths, seed=3, epoch=1, max_tokens=400)
    assert [r.tolist() for _, r in other_epoch] != [r.tolist() for _, r in plan_epoch(corpus, paths, **kwargs)]


def test_stream_resumes_at_the_same_batch(corpus):
    paths = [TrainingPath(kind="1:N")]
    kwargs = dict(seed=0, rank=0, world=1, max_tokens=300)
    full = batch_stream(corpus, paths, **kwargs)
    first = [next(full) for _ in range(60)]  # crosses an epoch boundary
    assert first[-1][0] >= 1
    resumed = batch_stream(corpus, paths, skip=37, **kwargs)
    for expected in first[37:]:
        got = next(resumed)
        assert got[0] == expected[0] and got[1] == expected[1] and (got[2] == expected[2]).all()


def test_token_budget_batches():
    costs = np.array([5, 1, 9, 3, 3, 20, 2])
    batches = token_budget_batches(costs, max_tokens=10)
    assert sorted(np.concatenate(batches).tolist()) == list(range(7))
    for batch in batches:
        assert len(batch) * costs[batch].max() <= 10 or len(batch) == 1
    assert [costs[b].tolist() for b in batches][-1] == [20]  # over budget: alone
