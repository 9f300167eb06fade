"""Sentence embeddings of many sentences: sorted by length, batched by token budget, in order."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from model.batching import pad, token_budget_batches
from model.nmt import MultilingualNMT


@torch.no_grad()
def embed(
    model: MultilingualNMT,
    sequences: Sequence[np.ndarray],
    lang: str,
    *,
    max_tokens: int = 8000,
    device: torch.device | str = "cpu",
    autocast: bool = False,
) -> np.ndarray:
    """Embeddings (S, D) float32 of `sequences` (token ids, no EOS) in language `lang`, in input order."""
    was_training = model.training
    model.eval()
    out = np.zeros((len(sequences), model.embedding_dim), dtype=np.float32)
    costs = np.array([len(s) + 1 for s in sequences])
    try:
        for batch in token_budget_batches(costs, max_tokens):
            ids, lengths = pad([sequences[i] for i in batch], eos=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                emb = model.encode(ids.to(device), lengths, lang)  # lengths stay on the host (packing)
            out[batch] = emb.float().cpu().numpy()
    finally:
        model.train(was_training)
    return out
