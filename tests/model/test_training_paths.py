"""Training paths: the signatures a tuple can serve, sampled by weight, for a whole window at once."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from model.training_paths import TrainingPath, sample_signatures

LANGS = ["en", "fr", "es", "ru", "ar", "zh"]


def draw(paths, available, n, seed=0, *, languages=LANGS, monolingual=False) -> list:
    """`n` draws for tuples that all hold `available` (None where no path serves them)."""
    present = np.tile([lang in available for lang in languages], (n, 1))
    signatures, index = sample_signatures(
        paths, languages, present, np.random.default_rng(seed), monolingual=monolingual
    )
    return [signatures[i] if i >= 0 else None for i in index]


@pytest.mark.parametrize("kind,n_src,n_tgt", [("1:1", 1, 1), ("1:N", 1, 5), ("M:1", 2, 1), ("M:N", 3, 3)])
def test_signature_sizes(kind, n_src, n_tgt):
    path = TrainingPath(kind=kind, m=3 if kind == "M:N" else 2)
    for sources, targets in draw([path], LANGS, 50):
        assert len(sources) == n_src and len(targets) == n_tgt
        assert not set(sources) & set(targets)
        assert list(sources) == sorted(sources) and list(targets) == sorted(targets)


def test_draws_are_uniform_over_what_a_path_allows():
    seen = Counter(draw([TrainingPath(kind="1:1")], LANGS, 30_000))
    assert len(seen) == 30  # every ordered pair of the six languages
    assert min(seen.values()) > 850 and max(seen.values()) < 1150  # 1,000 each expected (sd about 31)
    sources = Counter(s for s, _ in draw([TrainingPath(kind="M:N", m=2)], LANGS, 15_000, seed=1))
    assert len(sources) == 15 and min(sources.values()) > 850 and max(sources.values()) < 1150


def test_fixed_target_monolingual_and_infeasible():
    to_en = Counter(draw([TrainingPath(kind="1:1", targets=("en",))], LANGS, 200))
    assert {t for _, t in to_en} == {("en",)} and {s for s, _ in to_en} == {(x,) for x in LANGS if x != "en"}
    auto = Counter(draw([TrainingPath(kind="1:1")], ["fr"], 5, monolingual=True))
    assert auto == {(("fr",), ("fr",)): 5}
    assert draw([TrainingPath(kind="1:1")], ["fr"], 3) == [None] * 3  # a lone language: no pair
    assert draw([TrainingPath(kind="M:1", m=2)], ["fr", "en"], 3) == [None] * 3  # no target left
    restricted = TrainingPath(kind="1:N", sources=("fr",))
    assert set(draw([restricted], ["fr", "en", "es"], 20)) == {(("fr",), ("en", "es"))}
    # a mix falls back to the paths a tuple can serve
    mix = [TrainingPath(kind="M:1", weight=10.0), TrainingPath(kind="1:1", weight=1.0)]
    assert set(draw(mix, ["fr", "en"], 50)) == {(("fr",), ("en",)), (("en",), ("fr",))}


def test_tuples_holding_different_languages_draw_from_their_own():
    present = np.array(
        [
            [True, True, False, False, False, False],  # en fr
            [False, False, True, True, True, False],  # es ru ar
            [True, False, False, False, False, False],
        ]
    )  # en alone: no pair
    signatures, index = sample_signatures(
        [TrainingPath(kind="1:N")], LANGS, np.repeat(present, 40, axis=0), np.random.default_rng(0)
    )
    drawn = [signatures[i] if i >= 0 else None for i in index]
    assert all(set(s + t) == {"en", "fr"} for s, t in drawn[:40])
    assert all(set(s + t) == {"es", "ru", "ar"} and len(t) == 2 for s, t in drawn[40:80])
    assert drawn[80:] == [None] * 40
    with pytest.raises(ValueError, match="expected"):
        sample_signatures([TrainingPath(kind="1:N")], LANGS, present[:, :3], np.random.default_rng(0))


def test_path_weights_are_sampling_coefficients():
    mix = [TrainingPath(kind="1:1", weight=3.0), TrainingPath(kind="M:1", weight=1.0)]
    kinds = Counter(len(s) for s, _ in draw(mix, LANGS, 4000, seed=1))
    assert kinds[1] / 4000 == pytest.approx(0.75, abs=0.03)


def test_the_same_seed_draws_the_same():
    mix = [TrainingPath(kind="1:1"), TrainingPath(kind="M:N", m=3)]
    assert draw(mix, LANGS, 500, seed=7) == draw(mix, LANGS, 500, seed=7) != draw(mix, LANGS, 500, seed=8)
