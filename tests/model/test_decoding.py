"""`model.decoding`: one token at a time through a decoder, greedy and beam search, on real Bible verses
(word ids of Genesis 1, no tokenizer: the mechanics, not the quality).

What holds: a step at a time computes what the teacher-forced decoder computes (softmax, adaptive, shared); a
model that learned to regenerate verses from their vectors decodes each back word for word, greedy and by
beam; beam search finds the best-scoring sentence among all of them when its beam holds them all; every row
stops at its own limit."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
import torch

from core.dataset import BOS_ID, EOS_ID, PAD_ID
from model.batching import pad
from model.decoding import decode, decoder_of, sequence_log_prob
from model.nmt import MultilingualNMT

FIRST = 4  # the first word id: PAD, UNK, BOS and EOS come before


@pytest.fixture(scope="module")
def genesis(book_lines) -> tuple[list[np.ndarray], dict[str, int]]:
    """Genesis 1:1-10 (King James) as word ids, and the vocabulary."""
    texts = book_lines({"en": "k"}, [1])["en"][:10]
    verses = [re.sub(r"([,.;:])", r" \1", text.lower()).split() for text in texts]
    assert len(verses) == 10
    vocab = {word: FIRST + i for i, word in enumerate(sorted({w for v in verses for w in v}))}
    return [np.array([vocab[w] for w in v], dtype=np.int64) for v in verses], vocab


def _model(vocab_size: int, **kwargs) -> MultilingualNMT:
    torch.manual_seed(0)
    args = dict(languages=["en", "fr"], vocab_size=vocab_size, embed_dim=16, encoder_hidden=24, decoder_hidden=32)
    return MultilingualNMT(**{**args, "dropout": 0.0, **kwargs}).eval()


def _stepped(model: MultilingualNMT, vector: torch.Tensor, tokens: list[int], lang: str) -> float:
    """log p(tokens | vector), one `step` at a time (the caller ends `tokens` with EOS where it has one)."""
    decoder, index = decoder_of(model, lang)
    with torch.no_grad():
        state = decoder.initial_state(vector[None])
        token, total = torch.tensor([BOS_ID]), 0.0
        for nxt in tokens:
            log_probs, state = decoder.step(vector[None], token, state, index)
            total += float(log_probs[0, nxt])
            token = torch.tensor([nxt])
    return total


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"shared_decoder": True}, {"output": "adaptive", "adaptive_cutoffs": [12, 30]}, {"decoder_layers": 2}],
    ids=["softmax", "shared", "adaptive", "two-layers"],
)
def test_a_step_at_a_time_is_the_teacher_forced_decoder(genesis, kwargs):
    verses, vocab = genesis
    model = _model(FIRST + len(vocab), **kwargs)
    ids, lengths = pad(verses[:3], eos=True)
    with torch.no_grad():
        vectors = model.encode(ids, lengths, "en")
        for vector, verse in zip(vectors, verses[:3]):
            decoder, index = decoder_of(model, "fr")
            nll, tokens = decoder(vector[None], torch.from_numpy(verse)[None], torch.tensor([len(verse)]), index)
            assert int(tokens) == len(verse) + 1
            assert -_stepped(model, vector, [*verse.tolist(), EOS_ID], "fr") == pytest.approx(float(nll), rel=1e-5)
            assert sequence_log_prob(model, vector[None], [verse.tolist()], "fr")[0] == pytest.approx(
                -float(nll), rel=1e-5
            )


def test_a_step_never_predicts_padding_or_the_start(genesis):
    verses, vocab = genesis
    model = _model(FIRST + len(vocab))
    decoder, _ = decoder_of(model, "en")
    vector = torch.randn(2, model.embedding_dim)
    with torch.no_grad():
        log_probs, _ = decoder.step(vector, torch.tensor([BOS_ID, 7]), decoder.initial_state(vector))
    assert torch.isinf(log_probs[:, [PAD_ID, BOS_ID]]).all()
    others = [i for i in range(log_probs.shape[1]) if i not in (PAD_ID, BOS_ID)]
    assert torch.isfinite(log_probs[:, others]).all()
    assert ((log_probs.exp().sum(dim=1) > 0.5) & (log_probs.exp().sum(dim=1) < 1)).all()  # what is left of 1


def test_a_model_that_learned_to_regenerate_verses_decodes_them_back_word_for_word(genesis):
    """Ten verses of 11-30 words, each decoded from its 64-d vector alone once the model learned them (under 0.01
    nats a word)."""
    verses, vocab = genesis
    model = _model(FIRST + len(vocab), encoder_hidden=32, decoder_hidden=64).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    ids, lengths = pad(verses, eos=True)
    plain, plain_lengths = pad(verses, eos=False)
    for _ in range(1000):  # until each word costs under 0.01 nats: a few hundred steps
        losses = model(sources={"en": (ids, lengths)}, targets={"fr": (plain, plain_lengths)})
        optimizer.zero_grad()
        losses.loss.backward()
        optimizer.step()
        if losses.loss.detach().item() < 0.01:
            break
    assert losses.loss.detach().item() < 0.01
    model.eval()
    with torch.no_grad():
        vectors = model.encode(ids, lengths, "en")
    words = {i: w for w, i in vocab.items()}
    expected = [" ".join(words[i] for i in verse) for verse in verses]
    for beam in (1, 4):
        decoded = decode(model, vectors, "fr", beam=beam, max_len=torch.from_numpy(lengths.numpy() * 2))
        assert [" ".join(words.get(i, "?") for i in out) for out in decoded] == expected, beam


def test_beam_search_finds_the_best_scoring_sentence_when_its_beam_holds_every_one(genesis):
    """Three word ids (two words and UNK), at most 3 tokens: 40 sentences, each scored one step at a time; a
    beam of 64 keeps them all, so its answer is the best of them by mean log-probability (length penalty 1)
    and by sum (0)."""
    torch.manual_seed(3)
    model = _model(FIRST + 2)
    vectors = torch.randn(4, model.embedding_dim) * 3
    for penalty in (1.0, 0.0):
        found = decode(model, vectors, "en", beam=64, max_len=3, length_penalty=penalty)
        for vector, answer in zip(vectors, found):
            best = max(
                (_score(model, vector, list(seq), penalty), list(seq))
                for n in range(4)
                for seq in itertools.product([1, FIRST, FIRST + 1], repeat=n)
            )
            assert _score(model, vector, answer, penalty) == pytest.approx(best[0], abs=1e-5), (answer, best)


def _score(model: MultilingualNMT, vector: torch.Tensor, ids: list[int], penalty: float) -> float:
    """A sentence's score as beam search ranks it: its log-probability with EOS, or at the 3-token limit without
    it, over its length (tokens, the EOS counted) to the power `penalty`."""
    ended = ids if len(ids) == 3 else [*ids, EOS_ID]
    return _stepped(model, vector, ended, "en") / len(ended) ** penalty


def test_every_row_stops_at_its_own_limit_and_bad_arguments_are_refused(genesis):
    verses, vocab = genesis
    model = _model(FIRST + len(vocab))
    vectors = torch.randn(3, model.embedding_dim)
    for beam in (1, 3):
        out = decode(model, vectors, "en", beam=beam, max_len=torch.tensor([1, 2, 5]))
        assert [len(o) <= limit for o, limit in zip(out, [1, 2, 5])] == [True, True, True]
        assert all(EOS_ID not in o and PAD_ID not in o and BOS_ID not in o for o in out)
    with pytest.raises(KeyError, match="no decoder for language 'de'"):
        decode(model, vectors, "de")
    with pytest.raises(ValueError, match=r"expected \(B, 48\) vectors"):
        decode(model, torch.randn(3, 7), "en")
    with pytest.raises(ValueError, match="beam must be at least 1"):
        decode(model, vectors, "en", beam=0)
