"""Raw sentences -> their translations through the interlingua: the source language's encoder makes the
sentence's vector, the target language's decoder makes text of that vector alone (`model.decoding`).

    translator = SentenceTranslator.load("runs/bible6-cpu/train/model")
    translator.translate(["In the beginning God created the heaven and the earth."], "en", "fr", beam=4)
    translator.decode(vectors, "fr")     # vectors (N, D) of this model's space, e.g. stored by `embed`

The text goes through the same normalization and sentencepiece model as `embed` (`SentenceEmbedder`, whose
`token_ids` this reuses). A target language is one the model's training taught a decoder
(`model.args.trained_decoders`): a model trained by ranking and distillation alone decodes nothing, and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from core.errors import UserError
from model.args import trained_decoders
from model.decoding import decode
from model.inference import embed
from orchestration.adapters import model_dir as model_files
from orchestration.embedding.embedder import SentenceEmbedder, UnknownLanguage

ROWS_PER_BATCH = 64  # sentences decoded together (times the beam): one LSTM step each per token


class NoDecoder(UserError, ValueError):
    """A target language the model cannot decode into: it has no decoder for it, or one its training never taught."""


class VectorError(UserError, ValueError):
    """Vectors that are not of the model's space: another dimension, or not finite."""


def max_tokens_out(source_tokens: Sequence[int] | np.ndarray) -> np.ndarray:
    """The most tokens a translation of a sentence of `source_tokens` tokens gets: twice as many and 10 more."""
    return 2 * np.asarray(source_tokens, dtype=np.int64) + 10


class SentenceTranslator:
    def __init__(self, embedder: SentenceEmbedder, decoders: Sequence[str], model_dir: Path | None = None) -> None:
        self.embedder, self.decoders, self.model_dir = embedder, list(decoders), model_dir

    @classmethod
    def load(cls, model_dir: str | Path, *, device: str = "cpu", max_tokens: int = 8000) -> SentenceTranslator:
        """The translator of a (verified) model directory; its decoders run in torch (an ONNX export holds the
        encoders alone)."""
        model_dir = model_files.check(Path(model_dir))
        embedder = SentenceEmbedder.load(model_dir, device=device, max_tokens=max_tokens, backend="torch")
        meta = model_files.meta(model_dir / model_files.MODEL_FILE)
        return cls(embedder, trained_decoders(embedder.model.args, meta), model_dir)

    @classmethod
    def beside(cls, embedder: SentenceEmbedder, model_dir: str | Path) -> SentenceTranslator:
        """The translator of the model directory `embedder` was loaded from: its torch model shared, or loaded
        when `embedder` runs an ONNX export (which holds the encoders alone)."""
        from model.nmt import MultilingualNMT

        model_dir = Path(model_dir)
        if not isinstance(embedder.model, MultilingualNMT):
            return cls.load(model_dir, device=str(embedder.device), max_tokens=embedder.max_tokens)
        meta = model_files.meta(model_dir / model_files.MODEL_FILE)
        return cls(embedder, trained_decoders(embedder.model.args, meta), model_dir)

    @property
    def model(self):
        return self.embedder.model

    @property
    def languages(self) -> list[str]:
        return self.embedder.languages

    def check_target(self, lang: str, flag: str = "-t") -> None:
        """NoDecoder naming `flag` when `lang` is not a language the model's training taught a decoder."""
        if lang not in self.languages:
            raise NoDecoder(f"{flag} {lang}: the model has no decoder for {lang!r}; it knows {self.languages}")
        if lang not in self.decoders:
            taught = (
                f"its training taught decoders for {', '.join(self.decoders)} only"
                if self.decoders
                else "its training taught no decoder (model.nmt_weight was 0: ranking and distillation alone)"
            )
            raise NoDecoder(
                f"{flag} {lang}: the model's decoder for {lang!r} was never trained ({taught}); train its decoders "
                "on its frozen encoders (train.decoders_for: <this model>), or train a model with model.nmt_weight "
                "> 0 and a path whose targets hold it"
            )

    def check_source(self, lang: str, flag: str = "-l") -> None:
        if lang not in self.languages:
            raise UnknownLanguage(f"{flag} {lang}: the model knows {self.languages}, not {lang!r}")

    def token_ids(self, sentences: Sequence[str], lang: str) -> list[np.ndarray]:
        return self.embedder.token_ids(sentences, lang)

    def translate(self, sentences: Sequence[str], source: str, target: str, *, beam: int = 1) -> list[str]:
        """The translations of `sentences` (language `source`) into `target`, in order."""
        self.check_source(source)
        self.check_target(target)
        ids = self.token_ids(sentences, source)
        vectors = embed(self.model, ids, source, max_tokens=self.embedder.max_tokens, device=self.embedder.device)
        return self.decode(vectors, target, beam=beam, max_len=max_tokens_out([len(s) for s in ids]))

    def decode(
        self, vectors: np.ndarray, target: str, *, beam: int = 1, max_len: np.ndarray | None = None
    ) -> list[str]:
        """The text of each row of `vectors` (N, D) in `target`; `max_len` (N,): the most tokens of each
        (default `model.decoding.DEFAULT_MAX_LEN`). VectorError when they are not of the model's dimension or
        not finite."""
        self.check_target(target)
        vectors = np.asarray(vectors)
        dim = self.model.embedding_dim
        if vectors.ndim != 2 or vectors.shape[1] != dim:
            raise VectorError(
                f"expected vectors of dimension {dim} (this model's), got an array of shape {vectors.shape}"
            )
        if not np.isfinite(vectors).all():
            row = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
            raise VectorError(f"row {row} holds a value that is not a finite number")
        out: list[str] = []
        device = self.embedder.device
        for start in range(0, len(vectors), ROWS_PER_BATCH):
            chunk = torch.from_numpy(np.ascontiguousarray(vectors[start : start + ROWS_PER_BATCH], dtype=np.float32))
            limits = None if max_len is None else torch.from_numpy(max_len[start : start + ROWS_PER_BATCH])
            ids = decode(self.model, chunk.to(device), target, beam=beam, max_len=limits)
            out.extend(self.embedder.processor.decode(ids))
        return out
