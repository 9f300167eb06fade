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
The optional distillation loss (`distill_dim`) regresses each source sentence's
embedding, through a learned linear map where the sizes differ, onto a
teacher's embedding of the same sentence and of its tuple's pivot sentence
(Reimers & Gurevych 2020; `forward`'s `teacher`). Its file is `model.model_file`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from model.args import ModelArgs
from model.decoder import Output, SentenceDecoder
from model.encoder import Pooling, SentenceEncoder

SHARED = "shared"
DISTILL_LOSSES = ("mse", "contrastive")
PIVOT = "_pivot"  # `forward`'s teacher key of the pivot sentences' embeddings
Pair = tuple[torch.Tensor, torch.Tensor]  # (ids (B, T), lengths (B,))
Teacher = tuple[torch.Tensor, torch.Tensor]  # (the teacher's embeddings (B, D_teacher), which rows have one (B,))


class Losses(NamedTuple):
    """What `MultilingualNMT.forward` returns for one batch."""

    loss: torch.Tensor  # () the optimized scalar
    nll: dict[str, torch.Tensor]  # target language -> () summed NLL ({} when nmt_weight is 0)
    tokens: dict[str, torch.Tensor]  # target language -> () target tokens ({} when nmt_weight is 0)
    ranking: torch.Tensor | None  # () the ranking loss, None without one
    distill: torch.Tensor | None = None  # () the distillation loss, None without a teacher in the batch


class MultilingualNMT(nn.Module):
    @classmethod
    def build(cls, args: ModelArgs) -> MultilingualNMT:
        """The (untrained) model of these arguments."""
        return cls(**args.model_dump())

    def __init__(
        self,
        *,
        languages: Sequence[str],
        vocab_size: int,
        pooling: Pooling = "max",
        embed_dim: int = 128,
        encoder_hidden: int = 256,
        encoder_layers: int = 1,
        decoder_hidden: int = 256,
        decoder_layers: int = 1,
        dropout: float = 0.1,
        shared_encoder: bool = False,
        shared_decoder: bool = False,
        output: Output = "softmax",
        adaptive_cutoffs: Sequence[int] = (),
        ranking_scale: float = 20.0,
        ranking_margin: float = 0.3,
        nmt_weight: float = 1.0,
        nmt_targets: Sequence[str] | None = None,
        ranking_pairs: str = "source",
        distill_dim: int = 0,
        distill_loss: str = "mse",
    ) -> None:
        super().__init__()
        self.languages = list(languages)
        given = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        nmt_targets = None if nmt_targets is None else list(nmt_targets)
        given["nmt_targets"] = nmt_targets
        self.args = ModelArgs(**{**given, "languages": list(languages), "adaptive_cutoffs": list(adaptive_cutoffs)})
        self.nmt_targets = nmt_targets  # the languages the NMT loss decodes into (None: every target of a batch)
        if ranking_pairs not in ("source", "all"):
            raise ValueError(f"ranking_pairs must be 'source' or 'all', got {ranking_pairs!r}")
        self.ranking_scale, self.ranking_margin, self.nmt_weight = ranking_scale, ranking_margin, nmt_weight
        self.ranking_pairs = ranking_pairs
        self.vocab_size, self.embed_dim, self.output = vocab_size, embed_dim, output

        def encoder() -> SentenceEncoder:
            return SentenceEncoder(
                vocab_size=vocab_size,
                embed_dim=embed_dim,
                hidden_size=encoder_hidden,
                num_layers=encoder_layers,
                pooling=pooling,
                dropout=dropout,
            )

        names = [SHARED] if shared_encoder else self.languages
        built = {name: encoder() for name in names}
        self.encoders = nn.ModuleDict(built)
        self.embedding_dim: int = built[names[0]].output_dim

        def decoder() -> SentenceDecoder:
            return SentenceDecoder(
                vocab_size=vocab_size,
                embed_dim=embed_dim,
                hidden_size=decoder_hidden,
                sentence_dim=self.embedding_dim,
                num_layers=decoder_layers,
                dropout=dropout,
                num_languages=len(self.languages) if shared_decoder else 0,
                output=output,
                adaptive_cutoffs=adaptive_cutoffs,
            )

        names = [SHARED] if shared_decoder else self.languages
        self.decoders = nn.ModuleDict({name: decoder() for name in names})
        # the student's embedding in the teacher's space: a map where the sizes differ, else the embedding itself
        if distill_loss not in DISTILL_LOSSES:
            raise ValueError(f"distill_loss must be one of {DISTILL_LOSSES}, got {distill_loss!r}")
        self.distill_dim, self.distill_objective = distill_dim, distill_loss
        self.distill_map = (
            nn.Linear(self.embedding_dim, distill_dim, bias=False)
            if distill_dim and distill_dim != self.embedding_dim
            else None
        )

    encoders_frozen = False

    def freeze_encoders(self) -> None:
        """Train the decoders alone from now on: the encoders (and the distillation map) get no gradient and
        stay in eval mode (no dropout), so their vectors are exactly those of the weights loaded."""
        self.encoders_frozen = True
        for module in (self.encoders, self.distill_map):
            if module is not None:
                module.requires_grad_(False)
                module.eval()

    def train(self, mode: bool = True) -> MultilingualNMT:
        super().train(mode)
        if self.encoders_frozen:
            self.encoders.eval()
            if self.distill_map is not None:
                self.distill_map.eval()
        return self

    def _module(self, modules: nn.ModuleDict, lang: str) -> nn.Module:
        if SHARED in modules:
            return modules[SHARED]
        if lang not in modules:
            raise KeyError(f"the model has no module for language {lang!r}; it knows {self.languages}")
        return modules[lang]

    def encode(self, ids: torch.Tensor, lengths: torch.Tensor, lang: str) -> torch.Tensor:
        """The sentence embeddings (B, D) of `ids` (B, T) in language `lang`."""
        return self._module(self.encoders, lang)(ids, lengths)

    @torch.no_grad()
    def set_token_embeddings(self, vectors: torch.Tensor) -> None:
        """Every encoder's token embeddings from `vectors` (V, E), e.g. `model.lsi.lsi_embeddings`."""
        for encoder in self.encoders.values():
            assert isinstance(encoder, SentenceEncoder)
            if vectors.shape != encoder.embed.weight.shape:
                raise ValueError(f"expected ({encoder.embed.weight.shape}) vectors, got {tuple(vectors.shape)}")
            encoder.embed.weight.copy_(vectors)

    def set_token_order(self, counts: torch.Tensor) -> None:
        for dec in self.decoders.values():
            assert isinstance(dec, SentenceDecoder)
            dec.set_token_order(counts)

    def encode_many(self, batches: dict[str, Pair]) -> dict[str, torch.Tensor]:
        """Embeddings (B_lang, D) of several languages' batches. A shared encoder takes them all in one
        call (one LSTM pass over L x B sentences is far cheaper on a CPU than L passes)."""
        if SHARED not in self.encoders or len(batches) < 2:
            return {lang: self.encode(ids, lens, lang) for lang, (ids, lens) in batches.items()}
        width = max(ids.shape[1] for ids, _ in batches.values())
        ids = torch.cat([F.pad(ids, (0, width - ids.shape[1]), value=0) for ids, _ in batches.values()])  # (sum B, T)
        lengths = torch.cat([lens for _, lens in batches.values()])
        out = self.encoders[SHARED](ids, lengths)  # (sum B, D)
        return dict(zip(batches, out.split([len(lens) for _, lens in batches.values()])))

    def forward(
        self,
        sources: dict[str, Pair],
        targets: dict[str, Pair],
        ranking_weight: float = 0.0,
        teacher: dict[str, Teacher] | None = None,
        distill_weight: float = 0.0,
        teacher_weight: torch.Tensor | None = None,
    ) -> Losses:
        """Losses of one homogeneous batch: every source holds the same B tuples (`Losses`). `teacher`: per
        language, the teacher's embeddings of the batch's sentences in it and which rows have one; each
        source, and each target the ranking loss encodes whose language `teacher` holds, is regressed onto
        its own language's (where the teacher has it) and the pivot's (`teacher[PIVOT]`), with
        `distill_weight`, each row's term times its `teacher_weight` (B,) where given."""
        ranked = [lang for lang in targets if lang not in sources] if ranking_weight > 0 else []
        encoded = self.encode_many({**sources, **{lang: targets[lang] for lang in ranked}})
        sentence = torch.stack([encoded[lang] for lang in sources]).mean(dim=0)  # (B, D); M:1 averages
        nll, tokens = {}, {}
        loss = sentence.new_zeros(())
        if self.nmt_weight > 0:  # 0: the ranking loss alone trains the encoders, no decoder runs
            for lang, (ids, lens) in targets.items():
                if self.nmt_targets is not None and lang not in self.nmt_targets:
                    continue  # ranked, not decoded
                index = self.languages.index(lang) if SHARED in self.decoders else None
                nll[lang], tokens[lang] = self._module(self.decoders, lang)(sentence, ids, lens, index)
            if nll:
                loss = self.nmt_weight * sum(nll.values()) / sum(tokens.values()).clamp(min=1)
        ranking: torch.Tensor | None = None
        if ranked:
            if self.ranking_pairs == "all":  # every ordered pair of the batch's languages
                ranking = self.multiway_ranking_loss(torch.stack([encoded[lang] for lang in encoded]))
            else:  # the (averaged) source against each target, summed in order as sum() would
                pairs = [self.ranking_loss(sentence, encoded[lang]) for lang in ranked]
                ranking = pairs[0]
                for more in pairs[1:]:
                    ranking = ranking + more
                ranking = ranking / len(ranked)
            loss = loss + ranking_weight * ranking
        distill = None
        if teacher and distill_weight > 0:
            # the sources, and every other encoded language the batch carries the teacher's vectors of
            distilled = [lang for lang in encoded if lang in sources or lang in teacher]
            distill = self.distill_loss({lang: encoded[lang] for lang in distilled}, teacher, teacher_weight)
            loss = loss + distill_weight * distill
        return Losses(loss, nll, tokens, ranking, distill)

    def distill_loss(
        self, encoded: dict[str, torch.Tensor], teacher: dict[str, Teacher], row_weight: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Each source's mapped embedding (B, D) against the teacher's embeddings of the same sentence and of
        the pivot, over the rows the teacher has (masked means: nothing is read back to the host), each row's
        term times its `row_weight` (B,) where given (a source's weight: the mean stays over the rows the
        teacher has, so a batch of a source weighted 0.5 pulls half as hard).
        `mse`: the mean squared difference (Reimers & Gurevych 2020). `contrastive`: the additive-margin
        softmax of the ranking loss, the student's sentence against the teacher's vectors of the batch
        (both directions; rows without one are neither queries nor negatives), a term of the ranking
        loss's scale whatever the teacher's dimension."""
        if self.distill_dim == 0:
            raise ValueError("this model has no distillation map: build it with distill_dim")
        terms = []
        for lang, embedding in encoded.items():
            mapped = self.distill_map(embedding) if self.distill_map is not None else embedding
            for key in dict.fromkeys((lang, PIVOT)):
                if key in teacher:
                    vectors, present = teacher[key]
                    weight = present.float()
                    if self.distill_objective == "contrastive":
                        error = self._teacher_ranking(mapped.float(), vectors.float(), weight)
                    else:
                        error = (mapped.float() - vectors.float()).pow(2).mean(dim=-1)  # (B,)
                    scaled = weight if row_weight is None else weight * row_weight.float()
                    terms.append((error * scaled).sum() / weight.sum().clamp(min=1))
        return torch.stack(terms).mean() if terms else next(iter(encoded.values())).new_zeros(())

    def _teacher_ranking(self, student: torch.Tensor, vectors: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """(B,) additive-margin softmax losses of each row: the student's sentence among the teacher's vectors
        and the teacher's among the student's, averaged; columns of rows without a vector are masked out."""
        logits = self._margin_logits(F.normalize(student, dim=-1) @ F.normalize(vectors, dim=-1).T)  # (B, B)
        absent = 1e4 * (1 - weight)  # a large finite penalty: a row of all-absent columns stays finite
        labels = torch.arange(len(logits), device=logits.device)
        to_teacher = F.cross_entropy(logits - absent[None, :], labels, reduction="none")
        to_student = F.cross_entropy(logits.T - absent[None, :], labels, reduction="none")
        return (to_teacher + to_student) / 2

    def _margin_logits(self, sim: torch.Tensor) -> torch.Tensor:
        """The additive-margin softmax's logits of cosines (..., B, B): scaled, the margin taken off the
        diagonal (each sentence's translation)."""
        eye = torch.eye(sim.shape[-1], device=sim.device)
        return self.ranking_scale * (sim - self.ranking_margin * eye)

    def ranking_loss(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Additive-margin softmax over in-batch negatives, both directions. a, b: (B, D)."""
        return self.multiway_ranking_loss(torch.stack([a, b]))

    def multiway_ranking_loss(self, embeddings: torch.Tensor) -> torch.Tensor:
        """Additive-margin softmax for every ordered pair (p, q), p != q, of L aligned batches
        (L, B, D): each sentence of p against the B sentences of q, as the similarity search does."""
        langs, batch, _ = embeddings.shape
        unit = F.normalize(embeddings.float(), dim=-1)  # (L, B, D)
        sim = torch.einsum("pbd,qcd->pqbc", unit, unit)  # (L, L, B, B) cosines
        logits = self._margin_logits(sim)
        labels = torch.arange(batch, device=sim.device).repeat(langs * langs)
        losses = F.cross_entropy(logits.reshape(-1, batch), labels, reduction="none").view(langs, langs, batch)
        # the p == q pairs are computed and weighted out: selecting the others by a mask would read
        # the mask's count back from the device, a wait for the GPU at every step
        off = 1 - torch.eye(langs, device=sim.device)
        return (losses * off[:, :, None]).sum() / (langs * (langs - 1) * batch)
