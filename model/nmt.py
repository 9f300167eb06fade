"""The multilingual NMT system: encoders per input language, decoders per output language.

    model = MultilingualNMT(languages=["en", "fr"], vocab_size=8000, pooling="max", ...)
    emb = model.encode(ids, lengths, "fr")                 # (B, D): the sentence embedding
    out = model(sources={"fr": (ids, lens)}, targets={"en": (ids, lens)})   # losses of one batch

With `shared_encoder`/`shared_decoder` one module serves every language (LASER);
a shared decoder is told the target language by an embedding. A batch's
source embeddings are averaged (the paper's M:1), then decoded into each
target. The optional ranking loss pulls a sentence's embedding towards its
translation's against the other sentences of the batch (additive-margin
softmax with in-batch negatives, the modern form of a margin ranking loss).
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from model.decoder import SentenceDecoder
from model.encoder import SentenceEncoder

SHARED = "shared"
Pair = tuple[torch.Tensor, torch.Tensor]  # (ids (B, T), lengths (B,))


class MultilingualNMT(nn.Module):
    def __init__(
        self,
        *,
        languages: Sequence[str],
        vocab_size: int,
        pooling: str = "max",
        embed_dim: int = 128,
        encoder_hidden: int = 256,
        encoder_layers: int = 1,
        decoder_hidden: int = 256,
        decoder_layers: int = 1,
        dropout: float = 0.1,
        shared_encoder: bool = False,
        shared_decoder: bool = False,
        output: str = "softmax",
        adaptive_cutoffs: Sequence[int] = (),
        ranking_scale: float = 20.0,
        ranking_margin: float = 0.3,
        nmt_weight: float = 1.0,
    ) -> None:
        super().__init__()
        self.languages = list(languages)
        self.args: dict[str, Any] = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        self.args["languages"] = list(languages)
        self.args["adaptive_cutoffs"] = list(adaptive_cutoffs)
        self.ranking_scale, self.ranking_margin, self.nmt_weight = ranking_scale, ranking_margin, nmt_weight

        def encoder() -> SentenceEncoder:
            return SentenceEncoder(
                vocab_size=vocab_size, embed_dim=embed_dim, hidden_size=encoder_hidden,
                num_layers=encoder_layers, pooling=pooling, dropout=dropout,
            )

        names = [SHARED] if shared_encoder else self.languages
        self.encoders = nn.ModuleDict({name: encoder() for name in names})
        self.embedding_dim = self.encoders[names[0]].output_dim

        def decoder() -> SentenceDecoder:
            return SentenceDecoder(
                vocab_size=vocab_size, embed_dim=embed_dim, hidden_size=decoder_hidden,
                sentence_dim=self.embedding_dim, num_layers=decoder_layers, dropout=dropout,
                num_languages=len(self.languages) if shared_decoder else 0,
                output=output, adaptive_cutoffs=adaptive_cutoffs,
            )

        names = [SHARED] if shared_decoder else self.languages
        self.decoders = nn.ModuleDict({name: decoder() for name in names})

    def _module(self, modules: nn.ModuleDict, lang: str) -> nn.Module:
        if SHARED in modules:
            return modules[SHARED]
        if lang not in modules:
            raise KeyError(f"the model has no module for language {lang!r}; it knows {self.languages}")
        return modules[lang]

    def encode(self, ids: torch.Tensor, lengths: torch.Tensor, lang: str) -> torch.Tensor:
        """The sentence embeddings (B, D) of `ids` (B, T) in language `lang`."""
        return self._module(self.encoders, lang)(ids, lengths)

    def set_token_order(self, counts: torch.Tensor) -> None:
        for dec in self.decoders.values():
            dec.set_token_order(counts)

    def forward(
        self, sources: dict[str, Pair], targets: dict[str, Pair], ranking_weight: float = 0.0
    ) -> dict[str, Any]:
        """Losses of one homogeneous batch: every source holds the same B tuples.

        Returns loss (the optimized scalar), nll (summed NLL per target language),
        tokens (token count per target language; both empty when nmt_weight is 0)
        and ranking (the ranking loss, or None).
        """
        embeddings = [self.encode(ids, lens, lang) for lang, (ids, lens) in sources.items()]
        sentence = torch.stack(embeddings).mean(dim=0)  # (B, D); M:1 averages
        nll, tokens = {}, {}
        loss = sentence.new_zeros(())
        if self.nmt_weight > 0:  # 0: the ranking loss alone trains the encoders, no decoder runs
            for lang, (ids, lens) in targets.items():
                index = self.languages.index(lang) if SHARED in self.decoders else None
                nll[lang], tokens[lang] = self._module(self.decoders, lang)(sentence, ids, lens, index)
            loss = self.nmt_weight * sum(nll.values()) / sum(tokens.values()).clamp(min=1)
        ranking = None
        if ranking_weight > 0:
            pairs = [lang for lang in targets if lang not in sources]
            if pairs:
                ranking = sum(
                    self.ranking_loss(sentence, self.encode(*targets[lang], lang)) for lang in pairs
                ) / len(pairs)
                loss = loss + ranking_weight * ranking
        return {"loss": loss, "nll": nll, "tokens": tokens, "ranking": ranking}

    def ranking_loss(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Additive-margin softmax over in-batch negatives, both directions. a, b: (B, D)."""
        sim = F.normalize(a.float(), dim=-1) @ F.normalize(b.float(), dim=-1).T  # (B, B) cosines
        logits = self.ranking_scale * (sim - self.ranking_margin * torch.eye(len(a), device=a.device))
        labels = torch.arange(len(a), device=a.device)
        return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def save_model(model: MultilingualNMT, path: str, **meta: Any) -> None:
    """One file that `load_model` turns back into the model: constructor args, weights, `meta`."""
    torch.save({"args": model.args, "state_dict": model.state_dict(), "meta": meta}, path)


def load_model(path: str, map_location: str | torch.device = "cpu") -> tuple[MultilingualNMT, dict[str, Any]]:
    """The model saved by `save_model` (in eval mode) and its metadata."""
    blob = torch.load(path, map_location=map_location, weights_only=False)
    model = MultilingualNMT(**blob["args"])
    model.load_state_dict(blob["state_dict"])
    return model.eval(), blob.get("meta", {})
