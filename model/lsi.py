"""Token embeddings from the parallel corpus itself: cross-language LSI (Dumais et al., 1997).

The subwords of every language of a tuple are counted in one column of a
token x tuple matrix (sublinear tf, idf-weighted); its truncated SVD gives each
token a vector in which translations, which occur in the same tuples, lie
close. It costs seconds, and the encoder starts from embeddings that already
align the languages instead of random ones: on the 6-language Bible the
bag of these vectors alone has about a third of the dev similarity error of
chance (benchmarks/RESULTS.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
from sklearn.utils.extmath import randomized_svd


def cooccurrence_matrix(
    values: Sequence[np.ndarray], lengths: Sequence[np.ndarray], *, vocab_size: int
) -> sp.csr_matrix:
    """tf-idf token x tuple matrix (V, N) from per-language flat token ids and per-tuple lengths.

    values[i] holds language i's token ids of all N tuples back to back, lengths[i] (N,) how
    many belong to each tuple (0 where the tuple lacks the language).
    """
    if len(values) != len(lengths) or not values:
        raise ValueError(f"need one lengths array per values array, got {len(values)} and {len(lengths)}")
    tuples = len(lengths[0])
    rows = np.concatenate([np.asarray(v, dtype=np.int64) for v in values])
    cols = np.concatenate([np.repeat(np.arange(tuples), n) for n in lengths])
    if len(rows) and (rows.min() < 0 or rows.max() >= vocab_size):
        raise ValueError(f"token ids must lie in [0, {vocab_size}), got {rows.min()}..{rows.max()}")
    counts = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(vocab_size, tuples))
    counts.sum_duplicates()
    counts.data = np.log1p(counts.data)  # sublinear tf
    return sp.diags(idf_weights(counts)) @ counts


def idf_weights(matrix: sp.spmatrix) -> np.ndarray:
    """(V,) smoothed inverse document frequency of each token (row) over the tuples (columns)."""
    tuples = matrix.shape[1]
    df = np.diff(sp.csr_matrix(matrix).indptr)  # tuples holding each token
    return (np.log((tuples + 1) / (df + 1)) + 1).astype(np.float32)


def lsi_embeddings(matrix: sp.spmatrix, *, dim: int, seed: int = 0) -> np.ndarray:
    """(V, dim) float32 token vectors U * sqrt(S) of the rank-`dim` SVD, scaled to unit standard
    deviation over the tokens that occur (the scale of nn.Embedding's N(0, 1) init); unseen tokens
    get zeros."""
    if dim >= min(matrix.shape):
        raise ValueError(f"embedding size {dim} must be below the matrix's smaller side {min(matrix.shape)}")
    u, s, _ = randomized_svd(matrix, dim, n_iter=4, random_state=seed)
    vectors = (u * np.sqrt(s)).astype(np.float32)  # (V, dim)
    seen = np.diff(sp.csr_matrix(matrix).indptr) > 0
    vectors[~seen] = 0.0  # exact zeros, not the SVD's round-off
    return vectors / max(float(vectors[seen].std()), 1e-12)
