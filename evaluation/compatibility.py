"""Cross-version search: one model's queries among another model's candidates of the same sentences.

    errors = cross_errors(new, old)        # {"en-fr": 0.031, "en-en": 0.0, ...}: new en queries, old fr candidates

`new` and `old` are {language: (N, D) vectors}, row i of every language one tuple's sentence. A query's error
is counted when its nearest candidate (exact cosine search, top 1) is not its translation, as `evaluate` counts
its own error (`evaluation.xsim.error_matrix`). Every ordered pair of `new`'s languages with `old`'s, p = q too:
the same sentence, embedded by each model. A model trained to keep the old space (`train.compatible_with`)
should search the old vectors about as well as its own; two spaces trained apart are at chance.
"""

from __future__ import annotations

import numpy as np


class CompatibilityError(ValueError):
    """Vectors that cannot be searched against each other: other sizes, other row counts, values not finite."""


def search_error(queries: np.ndarray, candidates: np.ndarray) -> float:
    """The share of rows i whose nearest candidate (exact cosine, top 1) is not candidates[i]: the error
    `evaluate` counts (`xsim.error_matrix`), for vectors of two models."""
    from evaluation.xsim import error_matrix

    q, c = np.asarray(queries, dtype=np.float32), np.asarray(candidates, dtype=np.float32)
    if q.ndim != 2 or q.shape != c.shape:
        raise CompatibilityError(f"queries {q.shape} and candidates {c.shape}: one row of each per sentence, one size")
    for name, v in (("queries", q), ("candidates", c)):
        if not np.isfinite(v).all():
            raise CompatibilityError(f"{name}: row {int(np.flatnonzero(~np.isfinite(v).all(axis=1))[0])} is not finite")
    return error_matrix({"new": q, "old": c})[("new", "old")]


def cross_errors(new: dict[str, np.ndarray], old: dict[str, np.ndarray]) -> dict[str, float]:
    """{"p-q": error} of `new[p]`'s queries among `old[q]`'s candidates, for every p of `new` and q of `old`."""
    return {f"{p}-{q}": search_error(new[p], old[q]) for p in new for q in old}


def averages(pairs: dict[str, float]) -> dict[str, float]:
    """`avg_error` over the pairs p != q, `same_sentence_error` over p = q."""
    split = [(p == q, v) for key, v in pairs.items() for p, q in [key.split("-", 1)]]
    other = [v for same, v in split if not same]
    same = [v for same, v in split if same]
    return {
        "avg_error": float(np.mean(other)) if other else float("nan"),
        "same_sentence_error": float(np.mean(same)) if same else float("nan"),
    }
