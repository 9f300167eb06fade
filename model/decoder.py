"""The decoder: regenerates a sentence from its fixed-size embedding only.

No attention over encoder states: the initial state is derived from the
sentence embedding and the embedding is fed again at every step, so all the
decoder knows about the source is that one vector. A shared decoder (LASER)
also gets a target-language embedding at every step.

Output layer: the full softmax, or torch's adaptive softmax
(`nn.AdaptiveLogSoftmaxWithLoss`), which spends full-size projections only on
the most frequent tokens; `set_token_order` ranks the vocabulary by frequency
for it (sentencepiece ids are not in frequency order).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from core.dataset import BOS_ID, EOS_ID, PAD_ID

Output = Literal["softmax", "adaptive"]


class SentenceDecoder(nn.Module):
    def __init__(
        self,
        *,
        vocab_size: int,
        embed_dim: int,
        hidden_size: int,
        sentence_dim: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        num_languages: int = 0,
        lang_embed_dim: int = 32,
        output: Output = "softmax",
        adaptive_cutoffs: Sequence[int] = (),
        pad_id: int = PAD_ID,
        bos_id: int = BOS_ID,
        eos_id: int = EOS_ID,
    ) -> None:
        super().__init__()
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.num_layers, self.hidden_size = num_layers, hidden_size
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.lang_embed = nn.Embedding(num_languages, lang_embed_dim) if num_languages else None
        input_dim = embed_dim + sentence_dim + (lang_embed_dim if num_languages else 0)
        self.init_state = nn.Linear(sentence_dim, 2 * num_layers * hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.lstm = nn.LSTM(
            input_dim,
            hidden_size,
            num_layers=num_layers,
            batch_first=True,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.output = output
        self.project: nn.Module  # a Linear for the softmax, an AdaptiveLogSoftmaxWithLoss for the adaptive one
        if output == "softmax":
            self.project = nn.Linear(hidden_size, vocab_size)
        elif output == "adaptive":
            cutoffs = list(adaptive_cutoffs)
            if not cutoffs or cutoffs != sorted(set(cutoffs)) or cutoffs[0] <= 0 or cutoffs[-1] >= vocab_size:
                raise ValueError(
                    f"adaptive_cutoffs {cutoffs} must increase strictly, between 1 and the vocabulary "
                    f"size {vocab_size}; e.g. [{vocab_size // 8}, {vocab_size // 2}]"
                )
            self.project = nn.AdaptiveLogSoftmaxWithLoss(hidden_size, vocab_size, cutoffs, div_value=4.0)
        else:
            raise ValueError(f"output must be 'softmax' or 'adaptive', got {output!r}")
        # token id -> output class (frequency rank for the adaptive softmax); identity by default
        self.token_class: torch.Tensor
        self.register_buffer("token_class", torch.arange(vocab_size), persistent=True)

    def set_token_order(self, counts: torch.Tensor) -> None:
        """Rank token ids by descending training frequency (what the adaptive softmax needs)."""
        order = torch.argsort(counts.to(torch.float64), descending=True, stable=True)
        rank = torch.empty_like(self.token_class)
        rank[order] = torch.arange(len(order), device=rank.device)
        self.token_class.copy_(rank)

    def forward(
        self, sentence: torch.Tensor, ids: torch.Tensor, lengths: torch.Tensor, lang_index: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced NLL of `ids` (B, T, no BOS/EOS) given `sentence` (B, D).

        Returns (summed NLL over the B sentences' tokens and their EOS, number of such tokens).
        """
        batch, steps = ids.shape
        bos = ids.new_full((batch, 1), self.bos_id)
        inputs = torch.cat([bos, ids], dim=1)  # (B, T+1)
        gold = torch.cat([ids, ids.new_full((batch, 1), self.pad_id)], dim=1)  # (B, T+1)
        gold[torch.arange(batch, device=ids.device), lengths.to(ids.device)] = self.eos_id
        feed = [self.embed(inputs), sentence.unsqueeze(1).expand(-1, steps + 1, -1)]
        if self.lang_embed is not None:
            if lang_index is None:
                raise ValueError("a shared decoder needs the target language's index")
            lang = self.lang_embed.weight[lang_index]  # (L,)
            feed.append(lang.expand(batch, steps + 1, -1))
        x = self.dropout(torch.cat(feed, dim=-1))  # (B, T+1, E+D[+L])
        h0, c0 = torch.tanh(self.init_state(sentence)).view(batch, 2, self.num_layers, self.hidden_size).unbind(1)
        out, _ = self.lstm(x, (h0.transpose(0, 1).contiguous(), c0.transpose(0, 1).contiguous()))
        mask = gold != self.pad_id
        hidden = self.dropout(out[mask])  # (N, H)
        target = self.token_class[gold[mask]]  # (N,)
        if self.output == "softmax":
            nll = F.cross_entropy(self.project(hidden).float(), target, reduction="sum")
        else:
            nll = -self.project(hidden.float(), target).output.sum()
        return nll, mask.sum()

    # --- one token at a time (`model.decoding`): the same computation as `forward`, in eval mode -------------
    def initial_state(self, sentence: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The LSTM's (h0, c0), each (layers, B, H), from `sentence` (B, D): as `forward` starts."""
        batch = sentence.shape[0]
        h0, c0 = torch.tanh(self.init_state(sentence)).view(batch, 2, self.num_layers, self.hidden_size).unbind(1)
        return h0.transpose(0, 1).contiguous(), c0.transpose(0, 1).contiguous()

    def step(
        self,
        sentence: torch.Tensor,
        tokens: torch.Tensor,
        state: tuple[torch.Tensor, torch.Tensor],
        lang_index: int | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Log-probabilities (B, V) over token ids of the token after `tokens` (B,), and the next state. PAD and
        BOS are never predicted (their log-probability is -inf)."""
        feed = [self.embed(tokens[:, None]), sentence[:, None, :]]
        if self.lang_embed is not None:
            if lang_index is None:
                raise ValueError("a shared decoder needs the target language's index")
            feed.append(self.lang_embed.weight[lang_index].expand(len(tokens), 1, -1))
        out, state = self.lstm(self.dropout(torch.cat(feed, dim=-1)), state)
        hidden = self.dropout(out[:, 0])  # (B, H)
        if self.output == "softmax":
            by_class = F.log_softmax(self.project(hidden).float(), dim=-1)
        else:
            assert isinstance(self.project, nn.AdaptiveLogSoftmaxWithLoss)
            by_class = self.project.log_prob(hidden.float())
        log_probs = by_class[:, self.token_class]  # class -> token id
        log_probs[:, [self.pad_id, self.bos_id]] = float("-inf")
        return log_probs, state
