"""Cross-language LSI token embeddings: the matrix by hand, and alignment on real Bible text."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evaluation.xsim import error_matrix
from model.batching import ParallelCorpus
from model.lsi import cooccurrence_matrix, idf_weights, lsi_embeddings
from tests.support.models import small_model


def test_cooccurrence_matrix_counts_every_language_of_a_tuple_in_one_column():
    # two tuples; "en" holds tokens [1, 1, 2] then [3], "fr" holds [4] then nothing
    values = [np.array([1, 1, 2, 3]), np.array([4])]
    lengths = [np.array([3, 1]), np.array([1, 0])]
    matrix = cooccurrence_matrix(values, lengths, vocab_size=6).toarray()
    idf_one = np.log(3 / 2) + 1  # a token in one of two tuples
    np.testing.assert_allclose(
        matrix[:, 0], [0, np.log1p(2) * idf_one, idf_one * np.log(2), 0, idf_one * np.log(2), 0], rtol=1e-6
    )
    np.testing.assert_allclose(matrix[:, 1], [0, 0, 0, idf_one * np.log(2), 0, 0], rtol=1e-6)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 4\)"):
        cooccurrence_matrix(values, lengths, vocab_size=4)


def test_lsi_vectors_align_translations_of_real_verses(small_dataset):
    langs = ["en", "fr", "zh"]
    train = ParallelCorpus.read(small_dataset.data_dir, "train", langs)
    matrix = cooccurrence_matrix([train.values[x] for x in langs], [train.lengths[x] for x in langs], vocab_size=2000)
    vectors = lsi_embeddings(matrix, dim=32, seed=0)
    assert vectors.shape == (2000, 32) and vectors.dtype == np.float32
    seen = np.asarray(matrix.sum(axis=1)).ravel() > 0
    assert vectors[seen].std() == pytest.approx(1.0, rel=1e-4) and not vectors[~seen].any()
    np.testing.assert_array_equal(vectors, lsi_embeddings(matrix, dim=32, seed=0))  # deterministic for a seed
    # the bag of these vectors of held-out verses already finds translations far above chance (39/40)
    dev = ParallelCorpus.read(small_dataset.data_dir, "dev", langs)
    rows = dev.complete_rows()
    idf = idf_weights(matrix)
    bag = {x: np.stack([(vectors[dev.ids(x, r)] * idf[dev.ids(x, r), None]).sum(axis=0) for r in rows]) for x in langs}
    matrix = error_matrix(bag)
    errors = [matrix[("fr", "en")], matrix[("zh", "en")]]
    assert len(rows) >= 30 and max(errors) < 0.6, errors


def test_set_token_embeddings_fills_every_encoder():
    model = small_model()  # one encoder per language
    vectors = torch.randn(2000, 16)
    model.set_token_embeddings(vectors)
    for encoder in model.encoders.values():
        torch.testing.assert_close(encoder.embed.weight, vectors)
    with pytest.raises(ValueError, match="vectors"):
        model.set_token_embeddings(torch.randn(10, 16))
