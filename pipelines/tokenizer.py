"""The joint BPE model: temperature sampling across languages, training, encoding.

Plain functions over sentences; `pipelines.prepare` calls them inside Beam.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterable

import sentencepiece as spm

from core.dataset import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from pipelines.config import SpmConfig


def unit_hash(*parts: object) -> float:
    """A deterministic uniform number in [0, 1) from the parts (seeded hashing)."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def sampling_rates(counts: dict[str, int], config: SpmConfig) -> dict[str, float]:
    """Expected copies drawn of each sentence of each language, for the BPE training sample.

    Languages get p(lang) ~ (n_lang / N) ** (1 / T) of `sample_sentences`
    (T = temperature; 1 keeps the proportions, larger T flattens them so that a
    small language is not drowned). A rate above 1 repeats sentences.
    """
    counts = {lang: n for lang, n in counts.items() if n > 0}
    if not counts:
        raise ValueError("no training sentences to learn the BPE model from")
    total = sum(counts.values())
    weights = {lang: (n / total) ** (1.0 / config.temperature) for lang, n in counts.items()}
    norm = sum(weights.values())
    size = min(config.sample_sentences, total)
    return {lang: size * weights[lang] / norm / counts[lang] for lang in counts}


def copies(rate: float, *key: object) -> int:
    """How many copies of one sentence go into the sample: floor(rate), +1 with the remainder's odds."""
    whole = int(rate)
    return whole + (1 if unit_hash("spm", *key) < rate - whole else 0)


def train_bpe(sentences: Iterable[str], config: SpmConfig) -> bytes:
    """Train the BPE model on the sentences (in the given order) and return its serialized proto."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        model_type="bpe",
        vocab_size=config.vocab_size,
        character_coverage=config.character_coverage,
        num_threads=config.num_threads,
        input_sentence_size=0,  # the sample is already drawn, deterministically
        hard_vocab_limit=False,  # a small corpus gets a smaller vocabulary, not an error
        shuffle_input_sentence=False,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        max_sentence_length=1 << 14,
        minloglevel=2,
    )
    return model.getvalue()


def vocab_tsv(model_proto: bytes) -> str:
    """The `piece<TAB>score` listing that `spm_train` writes beside a model."""
    sp = spm.SentencePieceProcessor(model_proto=model_proto)
    return "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size()))
