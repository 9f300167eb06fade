"""Training paths: the signatures a tuple can serve, sampled by weight."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from model.training_paths import TrainingPath, sample_path, sample_signature

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
