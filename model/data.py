"""From token-id sequences to the padded tensors the model takes, and batching by token budget.

The one convention every caller shares: an encoder input ends with EOS
(as in LASER), a decoder target holds the bare ids (the decoder adds BOS/EOS).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

PAD_ID, EOS_ID = 0, 3


def pad(sequences: Sequence[np.ndarray], *, eos: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (B, T) and lengths (B,); with `eos`, EOS is appended to each sequence."""
    lengths = np.array([len(s) + eos for s in sequences], dtype=np.int64)
    if len(sequences) == 0:
        raise ValueError("cannot pad an empty batch")
    if lengths.min() == 0:
        raise ValueError("an empty token sequence cannot be encoded")
    ids = np.full((len(sequences), int(lengths.max())), PAD_ID, dtype=np.int64)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = seq
        if eos:
            ids[row, len(seq)] = EOS_ID
    return torch.from_numpy(ids), torch.from_numpy(lengths)


def token_budget_batches(costs: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """Split positions into batches of similar cost (length) with batch size x max cost <= max_tokens.

    Positions are sorted by cost (stable), so batches are length buckets; a
    position costlier than the budget gets a batch of its own.
    """
    order = np.argsort(costs, kind="stable")
    batches, start = [], 0
    for end in range(1, len(order) + 1):
        if end == len(order) or (end - start + 1) * costs[order[end]] > max_tokens:
            batches.append(order[start:end])
            start = end
    return batches
