"""Training paths and the per-epoch batch plans built from them."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from model.paths import TrainingPath, sample_path, sample_signature
from orchestration.corpus import ParallelCorpus, batch_stream, plan_epoch
from pipelines.dataset import split_files

LANGS = ["en", "fr", "es", "ru", "ar", "zh"]


@pytest.mark.parametrize("kind,n_src,n_tgt", [("1:1", 1, 1), ("1:N", 1, 5), ("M:1", 2, 1), ("M:N", 3, 3)])
def test_signature_sizes(kind, n_src, n_tgt):
    rng = np.random.default_rng(0)
    path = TrainingPath(kind=kind, m=3 if kind == "M:N" else 2)
    for _ in range(50):
        sources, targets = sample_signature(path, LANGS, rng)
        assert len(sources) == n_src and len(targets) == n_tgt
        assert not set(sources) & set(targets)
        assert list(sources) == sorted(sources)


def test_fixed_target_monolingual_and_infeasible():
    rng = np.random.default_rng(0)
    to_en = TrainingPath(kind="1:1", targets=("en",))
    seen = Counter(sample_signature(to_en, LANGS, rng) for _ in range(200))
    assert {t for _, t in seen} == {("en",)} and {s for s, _ in seen} == {(x,) for x in LANGS if x != "en"}
    auto = Counter(sample_signature(TrainingPath(kind="1:1"), ["fr"], rng, monolingual=True) for _ in range(5))
    assert auto == {(("fr",), ("fr",)): 5}
    assert sample_signature(TrainingPath(kind="1:1"), ["fr"], rng) is None  # a lone language: no pair
    assert sample_signature(TrainingPath(kind="M:1", m=2), ["fr", "en"], rng) is None  # no target left
    # a mix falls back to the paths a tuple can serve
    mix = [TrainingPath(kind="M:1", weight=10.0), TrainingPath(kind="1:1", weight=1.0)]
    assert sample_path(mix, ["fr", "en"], rng) in {(("fr",), ("en",)), (("en",), ("fr",))}


def test_path_weights_are_sampling_coefficients():
    rng = np.random.default_rng(1)
    mix = [TrainingPath(kind="1:1", weight=3.0), TrainingPath(kind="M:1", weight=1.0)]
    kinds = Counter(len(sample_path(mix, LANGS, rng)[0]) for _ in range(4000))
    assert kinds[1] / 4000 == pytest.approx(0.75, abs=0.03)


@pytest.fixture(scope="module")
def corpus(small_dataset) -> ParallelCorpus:
    return ParallelCorpus.read(split_files(small_dataset.data_dir, "train"), LANGS)


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
