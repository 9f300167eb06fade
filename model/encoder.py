"""Sentence encoders: token ids -> one fixed-size vector per sentence.

Two kinds, as compared by Schwenk & Douze (2017), and a baseline:
  pooling="max"   bidirectional LSTM, max over time of the top layer's states (D = 2H)
  pooling="last"  unidirectional LSTM, the top layer's last state (D = H)
  pooling="mean"  no LSTM: the mean of the subword embeddings (D = E), the
                  bag-of-subwords model of Etter et al.

Sequences are packed, so padding never reaches the LSTM or the max-pool: a
sentence gets the same vector alone and inside a padded batch.
"""
from __future__ import annotations

from typing import Literal

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

Pooling = Literal["max", "last", "mean"]


class SentenceEncoder(nn.Module):
    def __init__(
        self,
        *,
        vocab_size: int,
        embed_dim: int,
        hidden_size: int,
        num_layers: int = 1,
        pooling: Pooling = "max",
        dropout: float = 0.0,
        padding_idx: int = 0,
    ) -> None:
        super().__init__()
        if pooling not in ("max", "last", "mean"):
            raise ValueError(f"pooling must be 'max', 'last' or 'mean', got {pooling!r}")
        self.pooling = pooling
        bidirectional = pooling == "max"
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=padding_idx)
        self.dropout = nn.Dropout(dropout)
        if pooling == "mean":
            self.lstm = None
            self.output_dim = embed_dim
            return
        self.lstm = nn.LSTM(
            embed_dim,
            hidden_size,
            num_layers=num_layers,
            batch_first=True,
            bidirectional=bidirectional,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.output_dim = hidden_size * (2 if bidirectional else 1)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """ids (B, T) right-padded, lengths (B,) all >= 1 -> (B, D)."""
        if ids.dim() != 2 or lengths.shape != ids.shape[:1]:
            raise ValueError(f"expected ids (B, T) and lengths (B,), got {tuple(ids.shape)}, {tuple(lengths.shape)}")
        x = self.dropout(self.embed(ids))  # (B, T, E)
        if self.lstm is None:
            mask = torch.arange(ids.shape[1], device=ids.device)[None, :] < lengths.to(ids.device)[:, None]
            return (x * mask.unsqueeze(-1)).sum(dim=1) / lengths.to(x.device, x.dtype).unsqueeze(-1)  # (B, E)
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, (h, _) = self.lstm(packed)
        if self.pooling == "last":
            return h[-1]  # (B, H), restored to batch order by the packing
        states, _ = pad_packed_sequence(out, batch_first=True, padding_value=float("-inf"))  # (B, T', 2H)
        return states.max(dim=1).values  # (B, 2H)
