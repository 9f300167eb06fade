"""The one Ray Data embedding job that `evaluate`, `embed` and `mine` run: an actor pool, the model loaded
once per actor, each batch embedded by an actor on any node and written by the driver as a block, one small
record per block kept.

    shipped = ship_model(model_dir, backend)          # the model's files, once, in Ray's object store
    records = run_actors(dataset, SplitEmbedFn, {"model": shipped, ...}, write=..., rows=total,
                         rows_of=..., actors=2, cpus=1, use_gpu=False, batch_size=1024)

The actors, and the driver's writers of their rows, live in `orchestration.batch.actors`: SplitEmbedFn,
TextEmbedFn and UseEmbedFn (tuples of every language, `evaluate`), BlockEmbedFn (a block of an input file,
`embed` and `mine`).

Nothing ties an actor to the driver's host, whose disk the other hosts of a cluster cannot see (and which may
have no CPUs: a head started with `--num-cpus 0`): the model's files come through the object store
(`ship_model`; each actor lands a private copy, verifies it as every reader does and loads it), and an actor
returns its vectors instead of writing them. The driver writes each block as it comes, in the one format of
`evaluation.store`: the first three's key-ordered blocks into a staging folder, published as one folder
(`actors.tuples_block`, `store_writer.finish`); `BlockEmbedFn`'s input-ordered blocks in place, locally or at a
URI, each with its record, the completion marker a rerun looks for (`actors.save_input_block`).
Every array is written whole or not at all (`evaluation.npy.save_array`, or one PUT).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import numpy as np

from orchestration.adapters import logs
from orchestration.adapters.progress import Progress

if TYPE_CHECKING:
    from ray import ObjectRef

T = TypeVar("T")

# What `ship_model` answers and `landed_model` takes: each file's reference in Ray's object store, by its name
ShippedModel: TypeAlias = "list[dict[str, ObjectRef[bytes]]]"


def run_actors(
    dataset: Any,
    actor: type,
    kwargs: Mapping[str, object],
    *,
    write: Callable[[dict], T],
    rows: int,
    rows_of: Callable[[T], int],
    actors: int,
    cpus: int,
    use_gpu: bool,
    batch_size: int,
    verb: str = "embedded",
) -> list[T]:
    """Map `dataset` (made under `cluster.data_job`: its settings are the dataset's) through a pool of `actors`
    actors of `actor` (`kwargs` to its constructor, `cpus` CPUs or a GPU each, on any node) in batches of
    `batch_size`; each row an actor returns goes to `write` on the driver as it comes, and what `write` returns
    (a block's small record) is kept and returned. Our progress line (`rows` in all, `rows_of(record)` each)
    instead of Ray Data's bars, which show with -v; `verb` says what was done to them."""
    import ray.data

    context = ray.data.DataContext.get_current()
    bars, context.enable_progress_bars = context.enable_progress_bars, logs.verbosity() >= logs.VERBOSE
    progress, records = Progress(rows, verb=verb, unit="sentences"), []
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


def ship_model(model_dir: Path | None, backend: str = "torch") -> ShippedModel | None:
    """The files of the (verified, local) model directory, and of its export for an ONNX `backend`
    (`export.default_dir`), each put once into Ray's object store: {relative name: object ref}, in a list so
    that Ray hands the actors the references, not the bytes. None for the baseline (no model)."""
    if model_dir is None:
        return None
    import ray

    from orchestration.adapters import model_dir as model_files
    from orchestration.embedding import export

    files = [
        name
        for name in model_files.FILES
        if name != model_files.LEGACY_MODEL_FILE and (Path(model_dir) / name).is_file()
    ]
    folders = {"model": (Path(model_dir), files)}
    if backend != "torch":
        folder = export.default_dir(Path(model_dir))
        manifest = export.read_manifest(folder)
        if manifest is None:  # `backend` is resolved (`embedding.backends.resolve`): the export was there
            from orchestration.embedding.backends import BackendError

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
def landed_model(shipped: ShippedModel) -> Iterator[Path]:
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
