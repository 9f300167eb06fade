"""Writing a prepared dataset (`core.dataset`): the Parquet shards, the manifest, the local atomic swap, and
what a dataset directory may hold (a user's file there is never replaced). Only `prepare` writes datasets.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from core import ownership, storage, teacher
from core.dataset import (
    ATTEMPT,
    CONFIG_FILE,
    MANIFEST,
    SPLITS,
    SPM_MODEL,
    SPM_VOCAB,
    DatasetError,
    DatasetManifest,
    load_manifest,
)

# What a run writes under its attempt prefix, and nothing else: a user's file there is never taken for the
# product's (nor deleted with the prefix)
_ATTEMPT_FILES = re.compile(
    rf"{ATTEMPT}[^/]+(/({re.escape(ownership.STAGING_MARKER)}|{re.escape(SPM_MODEL)}|{re.escape(SPM_VOCAB)}|"
    rf"{re.escape(CONFIG_FILE)}|({'|'.join(SPLITS)})(/part-\d{{5}}-of-\d{{5}}\.parquet)?))?"
)


def schema(languages: list[str]) -> pa.Schema:
    """One row per tuple; per language its text, token ids and token count (null if absent)."""
    fields = [pa.field("key", pa.string(), nullable=False)]
    for lang in languages:
        fields += [
            pa.field(f"{lang}_text", pa.string()),
            pa.field(f"{lang}_ids", pa.list_(pa.int32())),
            pa.field(f"{lang}_len", pa.int32()),
        ]
    return pa.schema(fields)


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}/part-{index:05d}-of-{count:05d}.parquet"


def write_shard(path: str, rows: list[dict[str, Any]], languages: list[str]) -> None:
    """Write rows (sorted by key for identical reruns) to one Parquet file (a local path or a URI).

    Its size and checksum are taken once, for the manifest, when the dataset is complete.
    """
    rows = sorted(rows, key=lambda r: r["key"])
    fields = schema(languages)
    # column by column: half the time of Table.from_pylist over row dicts
    table = pa.table({f.name: pa.array([r.get(f.name) for r in rows], type=f.type) for f in fields}, schema=fields)
    fs, where = storage.resolve(path)  # a local path or a URI: the same writer, the same bytes
    fs.create_dir(posixpath.dirname(where), recursive=True)
    pq.write_table(table, where, filesystem=fs, compression="zstd")


def shard_rows(path: str | Path) -> int:
    """The number of rows in one Parquet shard (a local path or a URI), from its footer."""
    fs, where = storage.resolve(path)
    with fs.open_input_file(where) as handle:
        return pq.ParquetFile(handle).metadata.num_rows


def staging_dir(data_dir: Path, fingerprint: str) -> Path:
    """Where a run builds its dataset before publishing it (one per config and input)."""
    return data_dir.with_name(f".{data_dir.name}.partial-{fingerprint[:16]}")


def write_manifest(data_dir: str | Path, manifest: DatasetManifest) -> None:
    """The manifest, replaced whole: from then on `data_dir` (local or a URI) is the dataset it names."""
    storage.write_json(storage.join(data_dir, MANIFEST), manifest.dump())


def publish(staging: Path, data_dir: Path, manifest: DatasetManifest) -> None:
    """Write the manifest into `staging`, then swap it into `data_dir` atomically. The previous dataset stays
    whole until the new one is in; then only its own files are removed. ForeignDataError, before anything
    moves, if `data_dir` holds anything but a dataset's files (`check_replaceable`)."""
    write_manifest(staging, manifest)
    ownership.swap_in(staging, data_dir, check_replaceable(data_dir) if data_dir.exists() else None)


def own_entries(manifest: DatasetManifest | None) -> set[str]:
    """What a dataset consists of, as paths relative to its directory: the files its manifest names, the
    manifest, config.yaml and spm.vocab beside them, and their directories."""
    if manifest is None:
        return set()
    names = [f.path for split in manifest.splits.values() for f in split.files]
    spm = manifest.spm
    prefix = posixpath.dirname(spm.model)  # "" for a local dataset, `attempt-.../` under a URI
    names += [
        spm.model,
        spm.vocab or posixpath.join(prefix, SPM_VOCAB),
        posixpath.join(prefix, CONFIG_FILE),
        MANIFEST,
        ownership.STAGING_MARKER,
    ]
    return ownership.with_parents(names)


def check_replaceable(data_dir: str | Path, *, what: str = "dataset_dir") -> list[str]:
    """The entries of `data_dir` once it is known to hold nothing but a dataset (or nothing at all): what may
    be removed when a new dataset replaces it. ForeignDataError naming the path and the other files."""
    manifest = None
    if storage.exists(storage.join(data_dir, MANIFEST)):
        try:
            manifest = load_manifest(data_dir)
        except DatasetError as exc:
            raise ownership.ForeignDataError(
                f"{what}: {data_dir} holds a manifest.json that is not an interlingua dataset's ({exc}); it is "
                "never replaced: choose another directory"
            ) from None
    ours = own_entries(manifest)
    # a URI's attempt prefixes: the current dataset's files and those of crashed runs, each marked as staging
    # and holding only what a run writes there
    staged = {name for name in storage.subdirectories(data_dir) if ownership.is_staging(storage.join(data_dir, name))}
    # and the teacher embeddings computed from it (`core.teacher`), which go with it
    return ownership.check_only_ours(
        data_dir,
        lambda e: (
            e in ours
            or (e.split("/")[0] in staged and _ATTEMPT_FILES.fullmatch(e) is not None)
            or teacher.ours(data_dir, e)
        ),
        what=what,
        advice="choose a new or empty directory for the dataset, or move those files away",
    )
