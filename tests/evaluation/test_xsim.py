"""The one similarity-search routine against brute-force numpy on hand-built vectors: the dev error
(`error_matrix`) and the evaluation's metrics (`search_pairs` + `pair_metrics`) agree."""
from __future__ import annotations

import numpy as np
import pytest

from evaluation.xsim import average_error, error_matrix, pair_metrics, search_pairs


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
    langs = {lang: base + rng.normal(scale=s, size=base.shape).astype(np.float32)
             for lang, s in [("en", 0.0), ("fr", 0.8), ("zh", 1.6)]}
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
