"""`interlingua search`: the trained encoder on a query sentence.

A query sentence in any trained language -> its k nearest sentences of the
evaluation split in the chosen languages, with cosine scores (the paper's
Tables 5-8). The candidates are the embeddings `interlingua evaluate` wrote
(`evaluation.store`, the split's complete tuples), read block by block when
they are of this model; otherwise the split is embedded here.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from core.dataset import Dataset, file_sha256
from core.location import Location
from evaluation.search import search, search_blocks
from evaluation.store import MANIFEST, EmbeddingsMeta, StoredEmbeddings, StoreError
from orchestration.adapters import model_dir as model_files
from orchestration.config import Config, ConfigError
from orchestration.embedding.embedder import SentenceEmbedder

log = logging.getLogger(__name__)

Hits = list[tuple[float, str, str]]  # (cosine, tuple key, text), best first


def nearest_sentences(
    config: Config, query: str, lang: str, targets: list[str], k: int, model_dir: Path | None = None
) -> dict[str, Hits]:
    """{target language: [(cosine, tuple key, text), ...] best first}; ValueError for an empty query or a
    language the model does not know, DatasetError for a damaged split."""
    if not query.strip():
        raise ConfigError("--query is empty: give a sentence to search for")
    model_dir = model_files.fetch(model_dir or model_files.default(config.train_dir))  # a URI: a local copy
    embedder = SentenceEmbedder.load(model_dir, backend=config.runtime.backend)
    Dataset.open(config.data_dir).verify((config.evaluate.split,), spm=False)  # what the neighbours are read from
    unknown = [t for t in [lang, *targets] if t not in embedder.languages]
    if unknown:
        raise ConfigError(f"the model knows {embedder.languages}, not {unknown}")
    query_vec = embedder.embed([query], lang)  # (1, D)
    store = stored_embeddings(config, model_dir)
    out = {}
    for target in targets:
        if store is not None and target in store.languages:
            out[target] = _search_stored(store, query_vec, target, k)
        else:
            out[target] = _search_split(config, embedder, query_vec, target, k)
    return out


def open_embeddings(config: Config) -> StoredEmbeddings | None:
    """The evaluation's stored embeddings of the split, opened (`StoredEmbeddings.open`: every array and rows
    file verified against the manifest, StoreError naming a file that is not); None when there are none. At a
    URI: a copy in this user's cache folder, downloaded once per manifest and verified on every use (one that
    fails is fetched again). The search reads them mapped."""
    location = Location.of(config.eval_dir).join(config.evaluate.split, "embeddings")
    if not (location / MANIFEST).exists():
        return None

    @functools.cache
    def key() -> str:  # the manifest's digest: read once, for a store's copy only
        return hashlib.sha256((location / MANIFEST).read_bytes()).hexdigest()[:16]

    opened: list[StoredEmbeddings] = []

    def check(copy: Path) -> None:
        # on every use: the copy's manifest is the source's, and every file the sha256 it records (opened once)
        if hashlib.sha256((copy / MANIFEST).read_bytes()).hexdigest()[:16] != key():
            raise StoreError(f"{copy / MANIFEST} is not the manifest of {location}")
        opened[:] = [StoredEmbeddings.open(copy)]

    folder = location.cached_copy("embeddings", key, check)
    if not opened:  # a local folder: itself, neither copied nor checked by `check`
        return StoredEmbeddings.open(folder)
    return dataclasses.replace(opened[-1], folder=folder)  # a new copy is checked first, then renamed into place


def stored_embeddings(config: Config, model_dir: Path) -> StoredEmbeddings | None:
    """The evaluation's stored embeddings of the split when this model made them, else None."""
    store = open_embeddings(config)
    if store is None:
        return None
    folder = store.folder
    try:
        embedded_by = EmbeddingsMeta.model_validate(store.meta).model
    except ValidationError:  # not evaluate's embeddings: not this model's as far as can be told
        embedded_by = None
    if embedded_by != file_sha256(model_dir / model_files.MODEL_FILE):
        log.info("%s holds another model's embeddings; embedding the split here", folder)
        return None
    try:  # embeddings of token ids of another tokenizer (written before evaluate checked it) are wrong
        model_files.check_tokenizer(model_dir, Dataset.open(config.data_dir))
    except model_files.TokenizerMismatch:
        log.warning(
            "%s: the split was encoded with another tokenizer than the model's; embedding its text "
            "here with the model's own",
            folder,
        )
        return None
    return store


def _search_stored(store: StoredEmbeddings, query_vec: np.ndarray, target: str, k: int) -> Hits:
    return search_stored(store, query_vec, target, k)[0]


def search_stored(store: StoredEmbeddings, query_vecs: np.ndarray, target: str, k: int) -> list[Hits]:
    """The k nearest stored sentences in `target` of each query (Q, D), read block by block; one Hits per
    query (`interlingua search`, and `interlingua serve`'s nearest)."""
    scores, ids = search_blocks(query_vecs, store.blocks(target), min(k, len(store)), "cosine")  # (Q, k)
    return [
        [
            (float(s), str(store.column("key", i, i + 1)[0]), str(store.column(f"{target}_text", i, i + 1)[0]))
            for s, i in zip(row_scores, row_ids)
        ]
        for row_scores, row_ids in zip(scores, ids)
    ]


def _search_split(config: Config, embedder: SentenceEmbedder, query_vec: np.ndarray, target: str, k: int) -> Hits:
    table = Dataset.open(config.data_dir).read(config.evaluate.split, ["key", f"{target}_text"]).sort_by("key")
    table = table.filter(table[f"{target}_text"].is_valid())
    keys, texts = table["key"].to_pylist(), table[f"{target}_text"].to_pylist()
    log.info("embedding %d %s sentences of the %s split", len(texts), target, config.evaluate.split)
    scores, ids = search(query_vec, embedder.embed(texts, target), min(k, len(texts)), "cosine")
    return [(float(s), keys[i], texts[i]) for s, i in zip(scores[0], ids[0])]
