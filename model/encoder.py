"""Sentence encoders: token ids -> one fixed-size vector per sentence.

Two kinds, as compared by Schwenk & Douze (2017), and a baseline:
  pooling="max"   bidirectional LSTM, max over time of the top layer's states (D = 2H)
  pooling="last"  unidirectional LSTM, the top layer's last state (D = H)
  pooling="mean"  no LSTM: the mean of the subword embeddings (D = E), the
                  bag-of-subwords model of Etter et al.

Padding never reaches a real token's state or the max-pool, so a sentence gets
the same vector alone and inside a padded batch. The LSTM runs over the padded
batch, not a packed sequence (packing costs 3x the time on a CPU): each
direction is a left-to-right pass over right-padded input, the backward one over
every sentence reversed within its own length, and the states of padding
positions are masked out.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from core.dataset import PAD_ID

Pooling = Literal["max", "last", "mean"]


def output_size(pooling: str, embed_dim: int, hidden_size: int) -> int:
    """The size of a sentence embedding: the token embeddings' for mean pooling, the LSTM's hidden size
    (both directions for max pooling) otherwise."""
    if pooling == "mean":
        return embed_dim
    return hidden_size * (2 if pooling == "max" else 1)


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
        padding_idx: int = PAD_ID,
    ) -> None:
        super().__init__()
        if pooling not in ("max", "last", "mean"):
            raise ValueError(f"pooling must be 'max', 'last' or 'mean', got {pooling!r}")
        self.pooling = pooling
        bidirectional = pooling == "max"
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=padding_idx)
        self.dropout = nn.Dropout(dropout)
        self.output_dim = output_size(pooling, embed_dim, hidden_size)
        self.lstm: nn.LSTM | None = None
        if pooling == "mean":
            return
        self.lstm = nn.LSTM(
            embed_dim,
            hidden_size,
            num_layers=num_layers,
            batch_first=True,
            bidirectional=bidirectional,
            dropout=dropout if num_layers > 1 else 0.0,
        )

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """ids (B, T) right-padded, lengths (B,) all >= 1 -> (B, D)."""
        if ids.dim() != 2 or lengths.shape != ids.shape[:1]:
            raise ValueError(f"expected ids (B, T) and lengths (B,), got {tuple(ids.shape)}, {tuple(lengths.shape)}")
        x = self.dropout(self.embed(ids))  # (B, T, E)
        lengths = lengths.to(ids.device)
        mask = torch.arange(ids.shape[1], device=ids.device)[None, :] < lengths[:, None]  # (B, T)
        if self.lstm is None:
            return (x * mask.unsqueeze(-1)).sum(dim=1) / lengths.to(x.dtype).unsqueeze(-1)  # (B, E)
        reverse = _reverse_index(lengths, ids.shape[1]) if self.lstm.bidirectional else None  # (B, T)
        for layer in range(self.lstm.num_layers):
            if layer:
                x = self.dropout_between(x)
            states = [self._direction(x, layer, "")]  # (B, T, H)
            if reverse is not None:
                backward = self._direction(_gather_time(x, reverse), layer, "_reverse")
                states.append(_gather_time(backward, reverse))  # back to reading order
            x = torch.cat(states, dim=-1)  # (B, T, H or 2H)
        if self.pooling == "last":
            return x[torch.arange(len(x), device=x.device), lengths - 1]  # (B, H)
        return x.masked_fill(~mask.unsqueeze(-1), float("-inf")).max(dim=1).values  # (B, 2H)

    def dropout_between(self, x: torch.Tensor) -> torch.Tensor:
        assert self.lstm is not None  # mean pooling has no LSTM layers to drop out between
        return nn.functional.dropout(x, self.lstm.dropout, self.training)

    def _direction(self, x: torch.Tensor, layer: int, suffix: str) -> torch.Tensor:
        """One direction of one layer, left to right over right-padded x (B, T, in) -> (B, T, H)."""
        lstm = self.lstm
        assert lstm is not None  # mean pooling has no LSTM
        weights = [
            getattr(lstm, f"{name}_l{layer}{suffix}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        ]
        zeros = x.new_zeros(1, x.shape[0], lstm.hidden_size)
        out, _, _ = torch.lstm(x, (zeros, zeros), weights, True, 1, 0.0, self.training, False, True)
        return out


def _reverse_index(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """(B, T) time index that reverses each row's first `length` positions and keeps the padding."""
    t = torch.arange(steps, device=lengths.device)[None, :]
    return torch.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)


def _gather_time(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x (B, T, F) reordered along time by index (B, T)."""
    return x.gather(1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
