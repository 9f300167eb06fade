"""Cross-version search (evaluation/compatibility.py) on vectors whose relation is known: a space searched against
itself errs as it errs alone, and never on the same sentence; a rotated copy of it (a space trained apart keeps
its neighbours but not its coordinates) is at chance; bad vectors are refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.compatibility import CompatibilityError, averages, cross_errors, search_error
from evaluation.xsim import error_matrix


def spaces(rows: int = 300, dim: int = 16, noise: float = 0.8) -> dict[str, np.ndarray]:
    """Two languages' vectors of the same sentences: a shared meaning plus noise of each language's own."""
    rng = np.random.default_rng(0)
    meaning = rng.normal(size=(rows, dim))
    return {lang: (meaning + noise * rng.normal(size=(rows, dim))).astype(np.float32) for lang in ("en", "fr")}


def test_a_space_against_itself_errs_as_it_does_alone_and_a_rotated_one_is_at_chance():
    old = spaces()
    alone = error_matrix(old)
    same = cross_errors(old, old)
    assert same["en-fr"] == pytest.approx(alone[("en", "fr")]) and same["fr-en"] == pytest.approx(alone[("fr", "en")])
    assert same["en-en"] == same["fr-fr"] == 0.0
    assert 0.05 < averages(same)["avg_error"] < 0.9 and averages(same)["same_sentence_error"] == 0.0

    rotation, _ = np.linalg.qr(np.random.default_rng(1).normal(size=(16, 16)))
    apart = {lang: v @ rotation.astype(np.float32) for lang, v in old.items()}
    assert error_matrix(apart) == pytest.approx(alone)  # its own search: the same neighbours
    crossed = averages(cross_errors(apart, old))
    assert crossed["avg_error"] > 0.9 and crossed["same_sentence_error"] > 0.9  # against the old: at chance


def test_vectors_that_cannot_be_compared_are_refused_by_name():
    old = spaces()
    with pytest.raises(CompatibilityError, match="one row of each per sentence"):
        search_error(old["en"][:10], old["fr"])
    with pytest.raises(CompatibilityError, match="one size"):
        search_error(old["en"][:, :8], old["fr"][:, :8].repeat(2, axis=1))
    bad = old["en"].copy()
    bad[3, 1] = np.nan
    with pytest.raises(CompatibilityError, match="queries: row 3 is not finite"):
        search_error(bad, old["fr"])
