"""Raw sentences -> embeddings with a trained model directory, as training saw them.

    embedder = SentenceEmbedder.load("runs/bible6-cpu/train/model")
    vectors = embedder.embed(["Au commencement, Dieu créa les cieux et la terre."], "fr")   # (1, D)

A model directory (`interlingua train` exports it) holds model.safetensors, spm.model
and config.yaml; the text goes through the same normalization as `prepare`
(its config's prepare.normalize alone: `model_dir.normalization`) and the same sentencepiece model, then
`model.inference.embed`. `interlingua embed`, `interlingua search` and the
MLflow pyfunc model use this one class.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm
import torch

from core.errors import UserError
from core.normalize import Normalizer
from model.inference import embed
from model.nmt import MultilingualNMT
from orchestration.adapters import model_dir as model_files


class UnknownLanguage(UserError, ValueError):
    """A language the model has no encoder input for."""


class SentenceEmbedder:
    def __init__(
        self,
        model: MultilingualNMT,
        processor: spm.SentencePieceProcessor,
        normalizer: Normalizer,
        *,
        max_tokens: int = 8000,
        device: str = "cpu",
    ) -> None:
        self.model, self.processor, self.normalizer = model, processor, normalizer
        self.max_tokens, self.device = max_tokens, torch.device(device)

    @classmethod
    def load(
        cls,
        model_dir: str | Path,
        *,
        device: str = "cpu",
        max_tokens: int = 8000,
        backend: str = "auto",
        threads: int | None = None,
    ) -> SentenceEmbedder:
        """`backend`: runtime.backend (`embedding.backends`); its encoder stands in for the model in `embed`
        (`threads`: an ONNX backend's intra-op threads)."""
        from orchestration.embedding.backends import load_encoder

        model_dir = model_files.check(Path(model_dir))
        model_files.verify(model_dir)  # model.safetensors and spm.model as exported (ModelDirError otherwise)
        model = load_encoder(model_dir, backend=backend, device=device, threads=threads)
        processor = model_files.load_tokenizer(model_dir / model_files.SPM_FILE)
        return cls(
            model.to(device),
            processor,
            Normalizer(model_files.normalization(model_dir)),
            max_tokens=max_tokens,
            device=device,
        )

    @property
    def languages(self) -> list[str]:
        return self.model.languages

    def token_ids(self, sentences: Sequence[str], lang: str) -> list[np.ndarray]:
        texts = [self.normalizer(s, lang)[0] for s in sentences]
        return [np.asarray(ids, dtype=np.int64) for ids in self.processor.encode(texts)]

    @property
    def shared(self) -> bool:
        """Whether one encoder serves every language (LASER's): it then embeds a language it never saw too."""
        from model.nmt import SHARED

        return SHARED in (getattr(self.model, "encoders", None) or getattr(self.model, "sessions", None) or {})

    def embed(self, sentences: Sequence[str], lang: str, *, unseen: bool = False) -> np.ndarray:
        """(len(sentences), D) float32; an empty sentence gets the embedding of EOS alone. `unseen`: a language
        the model was not trained on is embedded by its shared encoder (a test set's unseen language)."""
        if lang not in self.languages and not (unseen and self.shared):
            raise UnknownLanguage(f"the model knows {self.languages}, not {lang!r}")
        return embed(
            self.model,
            self.token_ids(sentences, lang),
            lang,
            max_tokens=self.max_tokens,
            device=self.device,
            autocast=self.device.type == "cuda",
        )
