"""Per-pair retrieval metrics from (sharded) search results; plain functions over arrays.

For aligned sets (row i of the source translates row i of the target):
  error          the paper's Algorithm 1: the nearest target is not row i
  p_at_1, p_at_5 the true translation among the first 1 / 5
  mean_rank      1 + the number of targets scoring strictly better than the true one
  margin_error   LASER's ratio margin (k = 4): the forward top-k candidates rescored by
                 cos(x, y) / ((mean top-k cos of x + mean top-k cos of y) / 2)
  text_error     as `error`, but a nearest target whose text equals the true one's counts as
                 found (forgives duplicate target sentences)
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def retrieval_metrics(
    ids: np.ndarray, better_counts: np.ndarray | None, target_texts: Sequence[str] | None = None
) -> dict[str, float]:
    """ids (S, k >= 5) best first, better_counts (S,) from `search.count_better` summed over shards
    (None after an approximate search: no mean rank)."""
    truth = np.arange(len(ids))[:, None]
    hits = ids == truth
    out = {
        "error": float(1.0 - hits[:, 0].mean()),
        "p_at_1": float(hits[:, 0].mean()),
        "p_at_5": float(hits[:, :5].any(axis=1).mean()),
    }
    if better_counts is not None:
        out["mean_rank"] = float((1 + better_counts).mean())
    if target_texts is not None:
        texts = np.asarray(target_texts, dtype=object)
        out["text_error"] = float(np.mean(texts[ids[:, 0]] != texts[truth[:, 0]]))
    return out


def margin_choice(
    forward_scores: np.ndarray, forward_ids: np.ndarray, backward_mean: np.ndarray
) -> np.ndarray:
    """The ratio-margin best candidate of each query among its forward top-k (LASER).

    forward_scores/ids (S, k): each query's k nearest targets (cosine);
    backward_mean (T,): each target's mean cosine to its k nearest queries.
    """
    forward_mean = forward_scores.mean(axis=1, keepdims=True)  # (S, 1)
    margin = forward_scores / ((forward_mean + backward_mean[forward_ids]) / 2)  # (S, k)
    return forward_ids[np.arange(len(forward_ids)), margin.argmax(axis=1)]


def margin_error(chosen: np.ndarray) -> float:
    return float(np.mean(chosen != np.arange(len(chosen))))


# the paper names its six languages by the initials of their English names (Table 1)
PAPER_INITIALS = {"en": "e", "fr": "f", "es": "s", "ru": "r", "ar": "a", "zh": "z"}


def subset_name(languages: Sequence[str]) -> str:
    """'efs' for en fr es (the paper's style) when every language has an initial; else 'en-fr-de'."""
    if all(lang in PAPER_INITIALS for lang in languages):
        return "".join(PAPER_INITIALS[lang] for lang in languages)
    return "-".join(languages)


def subset_averages(matrix: dict[tuple[str, str], float], languages: Sequence[str]) -> dict[str, float]:
    """Averages over the growing language prefixes, as the paper's Table 1
    (en fr es ru ar zh -> ef, efs, efsr, efsra, efsraz)."""
    out = {}
    for n in range(2, len(languages) + 1):
        subset = languages[:n]
        name = subset_name(subset)
        values = [matrix[(p, q)] for p in subset for q in subset if p != q]
        out[name] = float(np.mean(values))
    return out
