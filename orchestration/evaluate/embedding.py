"""Embedding a held-out split (or a test set) to disk with the one embedding job (`batch.pool`).

Ray Data reads the split's Parquet shards in key order (a distributed sort
unless the shards are sorted key ranges already, as one shard is), keeps the
tuples that hold every evaluated language and streams them (a split of up to
`READ_HERE_ROWS` tuples is read here instead, the same rows in the same order)
through the job's actors (`runtime.embed_actors`, a GPU each with `runtime.use_gpu`,
on any node; the model's files come through Ray's object store), which embed
every language, sentences sorted by length and batched by token budget
(`model.inference.embed`), or run the offline multilingual USE baseline over
the texts, and return each batch's vectors; the driver writes each as a block
of `evaluation.store` (embeddings per language, keys, texts and their hashes)
into a staging folder as it comes and commits the folder (`store_writer.output`:
the previous embeddings stay whole until then).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from pathlib import Path

from core.dataset import Dataset
from core.location import Location
from core.output import Staging
from evaluation import store_writer
from evaluation.store import BlockRecord, EmbeddingsMeta, StoredEmbeddings
from orchestration.adapters.cluster import data_job
from orchestration.batch.actors import SplitEmbedFn, TextEmbedFn, UseEmbedFn, tuples_block
from orchestration.batch.pool import run_actors, ship_model
from orchestration.config import Config
from orchestration.evaluate import EvaluateError

log = logging.getLogger(__name__)


def complete_only(batch, *, columns: list[str]):
    """The rows of a pyarrow batch that hold every column in `columns`."""
    import pyarrow.compute as pc

    return batch.filter(functools.reduce(pc.and_, [pc.is_valid(batch[c]) for c in columns]))


# A split of at most this many tuples (a test split, a test set: thousands) is read here and handed to the actors
# as it is; a larger one is read, filtered and sorted by Ray Data's tasks on the cluster. Ray Data's read of a
# small split costs seconds of task start-ups for milliseconds of reading.
READ_HERE_ROWS = 20_000


def complete_tuples(
    config: Config, languages: list[str], use: bool, batch_rows: int = 1024, read_here_rows: int = READ_HERE_ROWS
):
    """A Ray Dataset of the split's tuples that hold every language in `languages`, in key order: `key`,
    each language's `_text` and, unless `use` (texts only: the baseline, or a model reading text), `_ids`;
    the first `evaluate.max_sentences` when set. A split of at most `read_here_rows` tuples is read by this
    process (the same rows in the same order), a larger one by Ray Data."""
    import pyarrow.parquet as pq
    import ray.data

    e = config.evaluate
    columns = ["key"] + [f"{lang}_{c}" for lang in languages for c in (("text",) if use else ("ids", "text"))]
    files = [str(path) for path in Dataset.open(config.data_dir).files(e.split)]
    ordered = key_ordered(files)
    total = sum(pq.read_metadata(path).num_rows for path in files)
    required = [c for c in columns if c != "key" and (use or c.endswith("_ids"))]
    if total <= read_here_rows:
        return _read_here(files, ordered, columns, required, e.max_sentences, batch_rows, config.runtime.embed_actors)
    # about a batch per block: the sort's tasks stay few for a small split, many for a large one
    dataset = ray.data.read_parquet(
        ordered or files, columns=columns, override_num_blocks=max(len(files), -(-total // batch_rows))
    )
    if ordered is None:
        dataset = dataset.sort("key")  # straight after the read: the sort's partitions are the read's blocks
    # a partial, not fn_kwargs: Ray's stub types the function as taking the batch alone (it names it the same)
    dataset = dataset.map_batches(
        functools.partial(complete_only, columns=required), batch_format="pyarrow", batch_size=None
    )
    if e.max_sentences:
        dataset = dataset.limit(e.max_sentences)
    # a batch per block, in order, so that every actor gets work (one Parquet file reads as one block)
    rows = min(total, e.max_sentences or total)
    return dataset.repartition(_blocks(rows, batch_rows, config.runtime.embed_actors), shuffle=False)


def _blocks(rows: int, batch_rows: int, actors: int) -> int:
    """How many blocks the actors get `rows` tuples in: about a batch each, and at least one per actor."""
    return max(-(-rows // batch_rows), actors, 1)


def _read_here(
    files: list[str],
    ordered: list[str] | None,
    columns: list[str],
    required: list[str],
    limit: int | None,
    batch_rows: int,
    actors: int,
):
    """`complete_tuples` of a small split, read by this process: its complete tuples in key order, the first
    `limit`, as a Ray Dataset of about a batch per block and at least a block per actor."""
    import pyarrow as pa
    import ray.data

    table = pa.concat_tables([Location.of(path).open_parquet().read(columns=columns) for path in ordered or files])
    table = complete_only(table, columns=required)
    if ordered is None:
        table = table.sort_by("key")
    table = table.slice(0, limit) if limit else table
    size = -(-max(len(table), 1) // _blocks(len(table), batch_rows, actors))
    return ray.data.from_arrow([table.slice(start, size) for start in range(0, len(table), size)] or [table])


def key_ordered(files: list[str]) -> list[str] | None:
    """The files in key order when each is sorted by key and their key ranges do not overlap (as a
    split of one shard is): read in that order, the split needs no sort. None otherwise. Reads the
    key column once, a batch at a time."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    spans = []
    for path in files:
        first = last = None
        for batch in pq.ParquetFile(path).iter_batches(columns=["key"], batch_size=65536):
            keys = batch.column(0)
            if not len(keys):
                continue
            if (last is not None and keys[0].as_py() <= last) or (
                len(keys) > 1 and not pc.all(pc.less(keys[:-1], keys[1:])).as_py()
            ):
                return None
            first, last = keys[0].as_py() if first is None else first, keys[-1].as_py()
        if first is not None:
            spans.append((first, last, path))
    spans.sort()
    if any(before[1] >= after[0] for before, after in zip(spans, spans[1:])):
        return None
    return [path for _, _, path in spans] + [path for path in files if path not in {s[2] for s in spans}]


def embed_split(
    config: Config,
    model_path: Path | None,
    languages: list[str],
    folder: Path,
    meta: EmbeddingsMeta | None = None,
    batch_rows: int = 1024,
    own_text: bool = False,
    backend: str = "torch",
    read_here_rows: int = READ_HERE_ROWS,
) -> StoredEmbeddings:
    """Embed the split's complete tuples into `folder` (`evaluation.store`: per language, in key order,
    with keys and texts; a block per batch of `batch_rows`; `model_path` None: the USE baseline; `own_text`:
    the model reads the text with its own tokenizer instead of the stored token ids; `read_here_rows`: see
    `complete_tuples`). EvaluateError under 2 tuples."""
    actor = UseEmbedFn if model_path is None else TextEmbedFn if own_text else SplitEmbedFn
    with _ordered():
        # read, filter and sort first, on every CPU: an actor pool as large as the cluster would leave
        # those tasks none; the sort holds the split in the object store (spilled to disk), never here
        tuples = complete_tuples(config, languages, actor is not SplitEmbedFn, batch_rows, read_here_rows).materialize()
        with _stored(folder, languages, meta) as (staging, records):
            records.extend(
                _embed(config, tuples, tuples.count(), actor, model_path, languages, staging, batch_rows, backend)
            )
            rows = sum(record.rows for record in records)
            if rows < 2:
                raise EvaluateError(
                    f"split {config.evaluate.split!r} has {rows} complete tuples; the search needs at least 2"
                )
    _log_skipped(config, rows)
    return StoredEmbeddings.open(folder)


def embed_texts(
    config: Config,
    table,
    model_path: Path | None,
    languages: list[str],
    folder: Path,
    meta: EmbeddingsMeta | None = None,
    batch_rows: int = 1024,
    backend: str = "torch",
) -> StoredEmbeddings:
    """Embed a test set's texts (a pyarrow table: key, <lang>_text, in key order) into `folder`, each
    model with its own tokenizer (`model_path` None: the USE baseline)."""
    import ray.data

    with _ordered():  # the dataset keeps the settings it was made under
        tuples = ray.data.from_arrow(table).repartition(max(-(-len(table) // batch_rows), 1), shuffle=False)
        with _stored(folder, languages, meta) as (staging, records):
            actor = UseEmbedFn if model_path is None else TextEmbedFn
            records.extend(
                _embed(config, tuples, len(table), actor, model_path, languages, staging, batch_rows, backend)
            )
    return StoredEmbeddings.open(folder)


@contextlib.contextmanager
def _stored(
    folder: Path, languages: list[str], meta: EmbeddingsMeta | None
) -> Iterator[tuple[Staging, list[BlockRecord]]]:
    """A staging folder for the embeddings of `folder` (`store_writer.output`: `.<name>.partial` beside it) and
    the list the block records written into it go in; when the block ends, the blocks finished and the folder
    committed in place of the previous one (ForeignDataError, nothing replaced, if it holds a user's file). On
    an error the staging folder is removed and the previous embeddings stay as they were."""
    out = store_writer.output(folder)
    staging = out.stage()
    records: list[BlockRecord] = []
    try:
        yield staging, records
        manifest = store_writer.finish(
            staging.local, records, languages=languages, meta=meta.model_dump() if meta else None
        )
        out.commit(staging, manifest)
    except BaseException:
        out.discard(staging)
        raise


def _embed(
    config: Config,
    tuples,
    rows: int,
    actor: type,
    model_path: Path | None,
    languages: list[str],
    staging: Staging,
    batch_rows: int,
    backend: str,
) -> list[BlockRecord]:
    """The block records of the `rows` `tuples` embedded by the one embedding job (`batch.pool`) and written
    into `staging` here, the model on `backend` (resolved: `embedding.backends`)."""
    e, r = config.evaluate, config.runtime
    shipped = ship_model(None if model_path is None else Path(model_path).parent, backend)
    kwargs = dict(
        model=shipped,
        languages=languages,
        max_tokens=e.max_tokens,
        use_gpu=r.use_gpu,
        dtype=e.dtype,
        backend=backend,
        threads=r.cpus_per_task,
    )
    return run_actors(
        tuples,
        actor,
        kwargs,
        write=lambda row: tuples_block(staging.local, row, languages, e.dtype),
        rows=rows * len(languages),
        rows_of=lambda record: record.rows * len(languages),
        actors=r.embed_actors,
        cpus=r.cpus_per_task,
        use_gpu=r.use_gpu,
        batch_size=batch_rows,
    )


def _log_skipped(config: Config, rows: int) -> None:
    import pyarrow.parquet as pq

    split = config.evaluate.split
    total = sum(pq.read_metadata(path).num_rows for path in Dataset.open(config.data_dir).files(split))
    if not config.evaluate.max_sentences and total > rows:
        log.info("%d tuples of %s lack a language and are left out of the search", total - rows, split)


def _ordered():
    """Ray Data keeps the sorted order through the actor pool (blocks are contiguous key ranges); a task that
    a dying node failed is run again (`cluster.data_job`)."""
    return data_job(preserve_order=True)
