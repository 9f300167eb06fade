"""`interlingua search` and `interlingua embed`: the trained encoder on raw text.

search: a query sentence in any trained language -> its k nearest sentences of
the evaluation split in the chosen languages, with cosine scores (the
paper's Tables 5-8). The candidates are the embeddings `interlingua evaluate`
wrote; when they are missing, the split is embedded here.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from evaluation.search import search
from orchestration import model_dir as model_files
from orchestration.config import Config
from orchestration.serve.embedder import SentenceEmbedder
from pipelines.dataset import read_split

log = logging.getLogger(__name__)


def _split_texts(config: Config, languages: list[str]) -> tuple[list[str], dict[str, list[str | None]]]:
    columns = ["key"] + [f"{lang}_text" for lang in languages]
    table = read_split(config.data_dir, config.evaluate.split, columns).sort_by("key")
    return table["key"].to_pylist(), {lang: table[f"{lang}_text"].to_pylist() for lang in languages}


def nearest_sentences(
    config: Config, query: str, lang: str, targets: list[str], k: int, model_dir: Path | None = None
) -> dict[str, list[tuple[float, str, str]]]:
    """{target language: [(cosine, tuple key, text), ...] best first}."""
    embedder = SentenceEmbedder.load(model_dir or model_files.default(config.train_dir))
    unknown = [t for t in [lang, *targets] if t not in embedder.languages]
    if unknown:
        raise ValueError(f"the model knows {embedder.languages}, not {unknown}")
    keys, texts = _split_texts(config, targets)
    stored = config.eval_dir / config.evaluate.split / "embeddings"
    query_vec = embedder.embed([query], lang)
    out = {}
    for target in targets:
        rows = [i for i, text in enumerate(texts[target]) if text is not None]
        cached = stored / f"{target}.npy"
        if cached.is_file() and json.loads((stored / "keys.json").read_text()) == [keys[i] for i in rows]:
            candidates = np.load(cached).astype(np.float32)
        else:
            log.info("embedding %d %s sentences of the %s split", len(rows), target, config.evaluate.split)
            candidates = embedder.embed([texts[target][i] for i in rows], target)
        scores, ids = search(query_vec, candidates, min(k, len(rows)), "cosine")
        out[target] = [(float(s), keys[rows[i]], texts[target][rows[i]]) for s, i in zip(scores[0], ids[0])]
    return out


def embed_lines(embedder: SentenceEmbedder, lines: Iterable[str], lang: str, chunk: int = 10000) -> Iterator[np.ndarray]:
    """Embeddings of `lines`, chunk by chunk (progress logged per chunk)."""
    batch: list[str] = []
    done = 0
    for line in lines:
        batch.append(line.rstrip("\r\n"))
        if len(batch) == chunk:
            yield embedder.embed(batch, lang)
            done += len(batch)
            log.info("embedded %d sentences", done)
            batch = []
    if batch:
        yield embedder.embed(batch, lang)
