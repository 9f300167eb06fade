"""The one similarity-search routine against brute-force numpy on hand-built vectors: the dev error
(`error_matrix`) and the evaluation's metrics (`search_pairs` + `pair_metrics`) agree."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.xsim import average_error, error_matrix, pair_metrics, search_pairs
from tests.support.embeddings import aligned, store_of


def brute_force_error(src: np.ndarray, tgt: np.ndarray) -> float:
    s = src / np.linalg.norm(src, axis=1, keepdims=True)
    t = tgt / np.linalg.norm(tgt, axis=1, keepdims=True)
    return float(np.mean((s @ t.T).argmax(axis=1) != np.arange(len(src))))


def test_known_errors():
    en = np.eye(4, dtype=np.float32)
    fr = np.eye(4, dtype=np.float32)[[0, 1, 3, 2]]  # sentences 2 and 3 swapped
    assert error_matrix({"en": en, "fr": en.copy()}) == {("en", "fr"): 0.0, ("fr", "en"): 0.0}
    assert error_matrix({"en": en, "fr": fr})[("en", "fr")] == 0.5
    results = search_pairs({"en": en, "fr": fr}, k=1)
    assert results[("en", "fr")].ids[:, 0].tolist() == [0, 1, 3, 2]
    scaled = fr * np.array([[1.0], [5.0], [0.1], [2.0]], dtype=np.float32)  # cosine ignores norms
    assert error_matrix({"en": en, "fr": scaled})[("en", "fr")] == 0.5


def test_agrees_with_brute_force_and_matrix_is_asymmetric():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(200, 16)).astype(np.float32)
    langs = {
        lang: base + rng.normal(scale=s, size=base.shape).astype(np.float32)
        for lang, s in [("en", 0.0), ("fr", 0.8), ("zh", 1.6)]
    }
    matrix = error_matrix(langs)
    assert set(matrix) == {(p, q) for p in langs for q in langs if p != q}
    for (p, q), err in matrix.items():
        assert err == pytest.approx(brute_force_error(langs[p], langs[q]))
    assert 0 < matrix[("en", "fr")] < matrix[("en", "zh")]
    assert average_error(matrix, ["en", "fr"]) == pytest.approx((matrix[("en", "fr")] + matrix[("fr", "en")]) / 2)


def test_the_dev_error_and_the_evaluation_metrics_are_the_same_number():
    rng = np.random.default_rng(1)
    base = rng.normal(size=(150, 8)).astype(np.float32)
    langs = {"en": base, "fr": base + rng.normal(scale=1.2, size=base.shape).astype(np.float32)}
    metrics = pair_metrics(search_pairs(langs, shards=4, k=5), None, metric="cosine", margin_k=4)
    for pair, err in error_matrix(langs).items():
        assert metrics[pair]["error"] == err and metrics[pair]["p_at_1"] == pytest.approx(1 - err)
        assert metrics[pair]["mean_rank"] >= 1 and "margin_error" in metrics[pair]


def test_rejects_misaligned_input():
    with pytest.raises(ValueError, match="differ in size"):
        error_matrix({"en": np.ones((3, 4), np.float32), "fr": np.ones((2, 4), np.float32)})
    with pytest.raises(ValueError, match="dimensions"):
        error_matrix({"en": np.ones((3, 4), np.float32), "fr": np.ones((3, 5), np.float32)})
    with pytest.raises(ValueError, match="at least two languages"):
        error_matrix({"en": np.ones((3, 4), np.float32)})


@pytest.mark.parametrize("shards,query_block", [(1, 1000), (3, 16), (7, 50)])
def test_stored_search_equals_in_memory_search_and_brute_force(tmp_path, shards, query_block):
    arrays = aligned()
    texts = {lang: [f"{lang} {i % 50}" for i in range(120)] for lang in arrays}  # repeated texts: text_error < error
    store = store_of(tmp_path, arrays, texts, cuts=[0, 13, 14, 64, 120])
    in_memory = search_pairs(arrays, shards=1, k=5)
    on_disk = search_pairs(store, shards=shards, k=5, query_block=query_block, results_dir=tmp_path / "search")
    for pair, r in in_memory.items():
        np.testing.assert_array_equal(on_disk[pair].ids[0:120], r.ids)
        np.testing.assert_array_equal(on_disk[pair].better[0:120], r.better)
        np.testing.assert_allclose(on_disk[pair].scores[0:120], r.scores, rtol=1e-6, atol=1e-6)
        p, q = pair
        assert np.mean(r.ids[:, 0] != np.arange(120)) == pytest.approx(brute_force_error(arrays[p], arrays[q]))
    assert (tmp_path / "search" / "fr-en" / "ids.npy").is_file()
    expected = pair_metrics(in_memory, texts, metric="cosine", margin_k=4)
    got = pair_metrics(on_disk, store.hashes(), metric="cosine", margin_k=4, block=query_block)
    assert got == expected  # exact: error, P@k, mean rank, margin and text errors
    assert 0 < expected[("en", "zh")]["text_error"] < expected[("en", "zh")]["error"]


def test_stored_search_of_the_first_queries(tmp_path):
    arrays = aligned(n=40)
    store = store_of(tmp_path, arrays, {lang: ["x"] * 40 for lang in arrays}, cuts=[0, 9, 40])
    first = search_pairs(store, shards=2, k=3, queries=10, query_block=4)
    full = search_pairs(arrays, k=3)
    for pair, r in first.items():
        assert r.ids.shape == (10, 3)
        np.testing.assert_array_equal(r.ids, full[pair].ids[:10])
