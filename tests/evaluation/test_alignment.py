"""The linear map between two embedding spaces (evaluation/alignment.py): the mechanics on arrays whose map is
known, and on real Bible text two spaces learned apart (each language's own LSA) that a map fitted on verse
pairs aligns for verses it never saw."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.alignment import AlignmentError, LinearMap, fit_map, residual
from tests.support.corpus import SMALL_BOOKS


def error(queries: np.ndarray, targets: np.ndarray) -> float:
    """The similarity-search error of the queries among the targets (`xsim.error_matrix`, cosine)."""
    from evaluation.xsim import error_matrix

    matrix = error_matrix({"q": queries.astype(np.float32), "t": targets.astype(np.float32)})
    return matrix[("q", "t")]


def test_a_known_map_is_recovered_with_its_bias_and_a_rotation_as_a_rotation():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 12))
    a, b = rng.normal(size=(12, 8)), rng.normal(size=8)
    mapping = fit_map(x, x @ a + b, bias=True)
    np.testing.assert_allclose(mapping.weight, a, atol=1e-4)
    np.testing.assert_allclose(mapping.bias, b, atol=1e-4)
    assert mapping.dims == (12, 8) and residual(mapping, x, x @ a + b) < 1e-8
    assert not fit_map(x, x @ a).bias.any()  # no bias unless asked

    rotation, _ = np.linalg.qr(rng.normal(size=(12, 12)))
    noisy = x @ rotation + rng.normal(scale=0.01, size=x.shape)
    turned = fit_map(x, noisy, orthogonal=True)
    np.testing.assert_allclose(turned.weight @ turned.weight.T, np.eye(12), atol=1e-5)  # still a rotation
    np.testing.assert_allclose(turned.weight, rotation, atol=1e-2)


def test_ridge_fits_fewer_pairs_than_dimensions_and_tends_to_least_squares():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(6, 20)), rng.normal(size=(6, 4))
    mapping = fit_map(x, y, ridge=1.0)
    assert np.isfinite(mapping.weight).all() and mapping.dims == (20, 4)
    x, y = rng.normal(size=(100, 5)), rng.normal(size=(100, 3))
    np.testing.assert_allclose(fit_map(x, y, ridge=1e-9).weight, fit_map(x, y).weight, atol=1e-5)


def test_a_map_is_saved_as_safetensors_and_a_file_of_another_shape_is_refused(tmp_path):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(2)
    mapping = fit_map(rng.normal(size=(30, 6)), rng.normal(size=(30, 4)), bias=True)
    mapping.save(tmp_path / "map.safetensors")
    again = LinearMap.load(tmp_path / "map.safetensors")
    np.testing.assert_array_equal(again.weight, mapping.weight)
    np.testing.assert_array_equal(again.bias, mapping.bias)
    save_file({"weight": mapping.weight, "bias": np.zeros(5, np.float32)}, str(tmp_path / "bad.safetensors"))
    with pytest.raises(AlignmentError, match="bias does not match"):
        LinearMap.load(tmp_path / "bad.safetensors")
    with pytest.raises(AlignmentError, match="expected vectors of dimension 6"):
        mapping.apply(np.zeros((2, 5)))


@pytest.mark.parametrize(
    "source, target, options, words",
    [
        (np.zeros((5, 3)), np.zeros((4, 3)), {}, "the same N rows"),
        (np.zeros((1, 3)), np.zeros((1, 3)), {}, "at least 2"),
        (np.array([[0.0, 1.0], [np.nan, 0.0]]), np.zeros((2, 2)), {}, "source row 1"),
        (np.zeros((4, 3)), np.zeros((4, 2)), {"orthogonal": True}, "same dimension"),
        (np.zeros((4, 3)), np.zeros((4, 2)), {"ridge": -1.0}, "ridge must be 0 or more"),
        (np.zeros((4, 3)), np.zeros((4, 3)), {"orthogonal": True, "ridge": 1.0}, "a rotation takes no ridge"),
    ],
)
def test_pairs_a_map_cannot_be_fitted_on_are_refused_saying_why(source, target, options, words):
    with pytest.raises(AlignmentError, match=words):
        fit_map(source, target, **options)


def test_a_map_fitted_on_verse_pairs_aligns_two_spaces_learned_apart(book_lines):
    """English and French verses each in a space of their own language alone (tf-idf words and a truncated SVD,
    both fitted on the verses the map is fitted on): the spaces share nothing, so searching one's held-out
    verses among the other's is chance. A map fitted on the other verse pairs finds most of their
    translations."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import make_pipeline

    lines = book_lines({"en": "k", "fr": "l"}, SMALL_BOOKS)
    held = np.arange(len(lines["en"])) % 5 == 0  # every fifth verse: unseen by the spaces and the map
    fitted, unseen = {}, {}
    for lang, texts in lines.items():
        space = make_pipeline(TfidfVectorizer(sublinear_tf=True), TruncatedSVD(64, random_state=0))
        fitted[lang] = space.fit_transform([t for t, h in zip(texts, held) if not h])
        unseen[lang] = space.transform([t for t, h in zip(texts, held) if h])
    chance = error(unseen["en"], unseen["fr"])
    mapping = fit_map(fitted["en"], fitted["fr"], ridge=1e-3)
    aligned = error(mapping.apply(unseen["en"]), unseen["fr"])
    print(f"{held.sum()} held-out verses: error {chance:.3f} unaligned, {aligned:.3f} aligned")
    assert chance > 0.85 and aligned < 0.5, (chance, aligned)
