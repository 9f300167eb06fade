"""Sentence embeddings of many sentences: sorted by length, batched by token budget, in order."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from model.batching import ParallelCorpus, pad, token_budget_batches
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
    pending: list[tuple[np.ndarray, torch.Tensor]] = []  # on the device: read back a few at a time
    try:
        for batch in token_budget_batches(costs, max_tokens):
            ids, lengths = pad([sequences[i] for i in batch], eos=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                pending.append((batch, model.encode(ids.to(device), lengths.to(device), lang).float()))
            if len(pending) == 32:
                _read_back(pending, out)
        _read_back(pending, out)
    finally:
        model.train(was_training)
    return out


def embed_rows(
    model: MultilingualNMT, corpus: ParallelCorpus, rows: Sequence[int] | np.ndarray, *, device: torch.device
) -> dict[str, np.ndarray]:
    """`embed` of the same `rows` (tuples) of `corpus` in each of its languages, under bf16 autocast on a
    GPU: what a similarity error over every ordered pair is computed from (the dev error of training)."""
    return {
        lang: embed(model, [corpus.ids(lang, r) for r in rows], lang, device=device, autocast=device.type == "cuda")
        for lang in corpus.languages
    }


def _read_back(pending: list[tuple[np.ndarray, torch.Tensor]], out: np.ndarray) -> None:
    """The pending batches' embeddings into `out`, with one wait for the device."""
    if pending:
        values = torch.cat([emb for _, emb in pending]).cpu().numpy()
        out[np.concatenate([rows for rows, _ in pending])] = values
        pending.clear()


@torch.no_grad()
def dev_nll(
    model: MultilingualNMT,
    corpus: ParallelCorpus,
    rows: Sequence[int] | np.ndarray,
    targets: Sequence[str],
    vectors: dict[str, np.ndarray],
    *,
    device: torch.device,
    max_tokens: int = 8000,
) -> float:
    """The teacher-forced NLL per target token (EOS included) of each language of `targets` decoded from every
    other language's `vectors` of the same `rows` (`embed_rows`'): what decoders trained on frozen encoders are
    selected by."""
    from model.decoding import decoder_of

    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    try:
        for target in (lang for lang in targets if lang in corpus.languages):
            decoder, index = decoder_of(model, target)
            gold = [corpus.ids(target, r) for r in rows]
            keep = np.flatnonzero([len(g) > 0 for g in gold])
            for batch in token_budget_batches(np.array([len(gold[i]) + 1 for i in keep]), max_tokens):
                at = keep[batch]
                ids, lengths = pad([gold[i] for i in at], eos=False)
                for source in (lang for lang in corpus.languages if lang != target):
                    sentence = torch.from_numpy(vectors[source][at]).to(device)
                    nll, n = decoder(sentence, ids.to(device), lengths.to(device), index)
                    total, tokens = total + float(nll), tokens + int(n)
    finally:
        model.train(was_training)
    return total / max(tokens, 1)
