"""Sentence vectors -> token ids: greedy and beam search through a target language's decoder.

    ids = decode(model, vectors, "fr", beam=4, max_len=lengths * 2 + 10)   # list of B token-id lists, no EOS

All the decoder knows of a sentence is its vector (`model.decoder`), so a vector from any encoder of the same
space (or one stored by `interlingua embed`) decodes the same way. Both searches run the B sentences as one
batch (beam search: B x beam rows), one LSTM step per token, and stop when every sentence has ended (EOS) or
reached its `max_len`. Beam search keeps the `beam` best partial hypotheses of each sentence by summed
log-probability and returns the finished one with the best score per token (`length_penalty` 1: the mean
log-probability; 0: the sum), as in Wu et al. (2016) with their alpha.
"""

from __future__ import annotations

import numpy as np
import torch

from model.decoder import SentenceDecoder
from model.nmt import SHARED, MultilingualNMT

DEFAULT_MAX_LEN = 200  # tokens, for a vector with no source length to scale from


def decoder_of(model: MultilingualNMT, lang: str) -> tuple[SentenceDecoder, int | None]:
    """The decoder of target language `lang` and, for a shared decoder, the language's index (KeyError naming
    the model's languages when it has none)."""
    if SHARED in model.decoders:
        if lang not in model.languages:
            raise KeyError(f"the model has no decoder for language {lang!r}; it knows {model.languages}")
        decoder, index = model.decoders[SHARED], model.languages.index(lang)
    else:
        if lang not in model.decoders:
            raise KeyError(f"the model has no decoder for language {lang!r}; it knows {model.languages}")
        decoder, index = model.decoders[lang], None
    assert isinstance(decoder, SentenceDecoder)
    return decoder, index


def _limits(max_len: int | np.ndarray | torch.Tensor | None, batch: int) -> torch.Tensor:
    if max_len is None:
        return torch.full((batch,), DEFAULT_MAX_LEN, dtype=torch.long)
    limits = torch.as_tensor(max_len, dtype=torch.long).expand(batch).clone()
    if (limits < 1).any():
        raise ValueError(f"max_len must be at least 1 token, got {int(limits.min())}")
    return limits


@torch.no_grad()
def decode(
    model: MultilingualNMT,
    vectors: torch.Tensor,
    lang: str,
    *,
    beam: int = 1,
    max_len: int | np.ndarray | torch.Tensor | None = None,
    length_penalty: float = 1.0,
) -> list[list[int]]:
    """Token ids (no BOS, no EOS) of each row of `vectors` (B, D) decoded into `lang`; `beam` 1 is greedy.
    `max_len`: the most tokens a sentence gets (one value or one per row; default `DEFAULT_MAX_LEN`)."""
    if beam < 1:
        raise ValueError(f"beam must be at least 1, got {beam}")
    decoder, index = decoder_of(model, lang)
    if vectors.ndim != 2 or vectors.shape[1] != model.embedding_dim:
        raise ValueError(f"expected (B, {model.embedding_dim}) vectors, got {tuple(vectors.shape)}")
    was_training = decoder.training
    decoder.eval()
    try:
        sentence = vectors.to(next(decoder.parameters()).dtype)
        limits = _limits(max_len, len(sentence)).to(sentence.device)
        if beam == 1:
            return _greedy(decoder, sentence, index, limits)
        return _beam(decoder, sentence, index, limits, beam, length_penalty)
    finally:
        decoder.train(was_training)


def _greedy(decoder: SentenceDecoder, sentence: torch.Tensor, index: int | None, limits: torch.Tensor):
    batch = len(sentence)
    state = decoder.initial_state(sentence)
    tokens = torch.full((batch,), decoder.bos_id, dtype=torch.long, device=sentence.device)
    done = torch.zeros(batch, dtype=torch.bool, device=sentence.device)
    steps: list[torch.Tensor] = []
    for t in range(int(limits.max())):
        log_probs, state = decoder.step(sentence, tokens, state, index)
        tokens = torch.where(done, decoder.eos_id, log_probs.argmax(dim=-1))  # an ended sentence stays ended
        steps.append(tokens)
        done = done | (tokens == decoder.eos_id) | (limits <= t + 1)  # a sentence at its limit ends there
        if bool(done.all()):
            break
    out = torch.stack(steps, dim=1).tolist()
    return [
        row[: row.index(decoder.eos_id)] if decoder.eos_id in row else row[:limit]
        for row, limit in zip(out, limits.tolist())
    ]


def _beam(
    decoder: SentenceDecoder,
    sentence: torch.Tensor,
    index: int | None,
    limits: torch.Tensor,
    beam: int,
    length_penalty: float,
) -> list[list[int]]:
    """Beam search: a sentence is done once `beam` of its hypotheses ended (fairseq's rule), or at its limit,
    where every live hypothesis ends with the token it has."""
    batch, vocab, device = len(sentence), decoder.embed.num_embeddings, sentence.device
    rows = sentence.repeat_interleave(beam, dim=0)  # (B*K, D): sentence b's hypotheses are rows b*K .. b*K+K-1
    state = decoder.initial_state(rows)
    tokens = torch.full((batch * beam,), decoder.bos_id, dtype=torch.long, device=device)
    scores = torch.full((batch, beam), float("-inf"), device=device)
    scores[:, 0] = 0.0  # one live hypothesis to start from: the others would repeat it
    history: list[list[list[int]]] = [[[] for _ in range(beam)] for _ in range(batch)]
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(batch)]
    live = [True] * batch
    for t in range(int(limits.max())):
        log_probs, state = decoder.step(rows, tokens, state, index)
        total = (scores.view(-1, 1) + log_probs).view(batch, beam * vocab)
        best, at = total.topk(2 * beam, dim=1)  # enough that `beam` of them go on even if the others end here
        picked = list(range(batch * beam))  # the row each new hypothesis extends (its own for an ended sentence)
        next_tokens = [decoder.eos_id] * (batch * beam)
        next_scores = [[float("-inf")] * beam for _ in range(batch)]
        for b, (row_scores, row_at) in enumerate(zip(best.tolist(), at.tolist())):
            if not live[b]:
                continue
            at_limit, kept, extended = int(limits[b]) <= t + 1, 0, [list[int]() for _ in range(beam)]
            for score, flat in zip(row_scores, row_at):
                if score == float("-inf") or kept == beam:
                    break
                k, token = divmod(flat, vocab)
                sequence = history[b][k]
                if token == decoder.eos_id or at_limit:
                    ended = sequence if token == decoder.eos_id else [*sequence, token]
                    finished[b].append((score / (len(sequence) + 1) ** length_penalty, ended))
                    continue
                picked[b * beam + kept], next_tokens[b * beam + kept] = b * beam + k, token
                next_scores[b][kept] = score
                extended[kept] = [*sequence, token]
                kept += 1
            history[b] = extended
            live[b] = not at_limit and kept > 0 and len(finished[b]) < beam
        if not any(live):
            break
        rows_kept = torch.tensor(picked, device=device)
        state = (state[0].index_select(1, rows_kept), state[1].index_select(1, rows_kept))
        tokens = torch.tensor(next_tokens, device=device)
        scores = torch.tensor(next_scores, device=device)
    return [max(ends, key=lambda end: end[0])[1] if ends else [] for ends in finished]


def sequence_log_prob(model: MultilingualNMT, vectors: torch.Tensor, ids: list[list[int]], lang: str) -> list[float]:
    """The teacher-forced log-probability of each `ids` (with its EOS) given its vector: what a search scores."""
    decoder, index = decoder_of(model, lang)
    was_training = decoder.training
    decoder.eval()
    try:
        with torch.no_grad():
            out = []
            for row, sequence in zip(vectors, ids):
                padded = torch.tensor([sequence], dtype=torch.long).view(1, len(sequence))
                nll, _ = decoder(row[None], padded, torch.tensor([len(sequence)]), index)
                out.append(-float(nll))
            return out
    finally:
        decoder.train(was_training)
