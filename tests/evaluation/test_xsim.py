"""The similarity-search error against a brute-force numpy computation on hand-built vectors."""
from __future__ import annotations

import numpy as np
import pytest

from evaluation.xsim import average_error, error_matrix, nearest, similarity_error


def brute_force_error(src: np.ndarray, tgt: np.ndarray) -> float:
    s = src / np.linalg.norm(src, axis=1, keepdims=True)
    t = tgt / np.linalg.norm(tgt, axis=1, keepdims=True)
    return float(np.mean((s @ t.T).argmax(axis=1) != np.arange(len(src))))


def test_known_errors():
    en = np.eye(4, dtype=np.float32)
    fr = np.eye(4, dtype=np.float32)[[0, 1, 3, 2]]  # sentences 2 and 3 swapped
    assert similarity_error(en, en) == 0.0
    assert similarity_error(en, fr) == 0.5
    assert nearest(en, fr).tolist() == [0, 1, 3, 2]
    scaled = fr * np.array([[1.0], [5.0], [0.1], [2.0]], dtype=np.float32)  # cosine ignores norms
    assert similarity_error(en, scaled) == 0.5


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


def test_rejects_misaligned_input():
    with pytest.raises(ValueError, match="differ in size"):
        similarity_error(np.ones((3, 4), np.float32), np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match=r"\(Q, D\)"):
        nearest(np.ones((3, 4), np.float32), np.ones((3, 5), np.float32))
