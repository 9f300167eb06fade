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

from collections.abc import Sequence

import numpy as np


def retrieval_counts(
    ids: np.ndarray, better_counts: np.ndarray | None, target_texts: np.ndarray | None = None, *, offset: int = 0
) -> dict[str, int]:
    """What `metrics_from_counts` needs, counted over one block of queries (rows offset, offset + 1,
    ...): ids (b, k >= 5) best first, better_counts (b,) from `search.count_better` summed over shards
    (None after an approximate search: no mean rank), target_texts (S,) of the whole searched language
    (texts or their hashes). Counts of blocks add up to the counts of all queries."""
    truth = offset + np.arange(len(ids))[:, None]  # (b, 1)
    hits = ids == truth  # (b, k)
    out = {"queries": len(ids), "hits_at_1": int(hits[:, 0].sum()), "hits_at_5": int(hits[:, :5].any(axis=1).sum())}
    if better_counts is not None:
        out["rank_sum"] = int((1 + better_counts).sum())
    if target_texts is not None:
        texts = np.asarray(target_texts)
        out["text_errors"] = int(np.sum(texts[ids[:, 0]] != texts[truth[:, 0]]))
    return out


def metrics_from_counts(counts: dict[str, int]) -> dict[str, float]:
    """The metrics of all queries from their summed `retrieval_counts` (and `margin_errors`)."""
    n = counts["queries"]
    out = {
        "error": float(1.0 - counts["hits_at_1"] / n),
        "p_at_1": counts["hits_at_1"] / n,
        "p_at_5": counts["hits_at_5"] / n,
    }
    for count, name in (("rank_sum", "mean_rank"), ("text_errors", "text_error"), ("margin_errors", "margin_error")):
        if count in counts:
            out[name] = counts[count] / n
    return out


def margin_choice(forward_scores: np.ndarray, forward_ids: np.ndarray, backward_mean: np.ndarray) -> np.ndarray:
    """The ratio-margin best candidate of each query among its forward top-k (LASER).

    forward_scores/ids (S, k): each query's k nearest targets (cosine);
    backward_mean (T,): each target's mean cosine to its k nearest queries.
    """
    forward_mean = forward_scores.mean(axis=1, keepdims=True)  # (S, 1)
    margin = forward_scores / ((forward_mean + backward_mean[forward_ids]) / 2)  # (S, k)
    return forward_ids[np.arange(len(forward_ids)), margin.argmax(axis=1)]


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
