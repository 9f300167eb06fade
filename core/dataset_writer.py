"""Writing a prepared dataset (`core.dataset`): the Parquet shards, the manifest, and the dataset as an output
kind (`DatasetKind`: what a dataset directory may hold; a user's file there is never replaced), committed by
the output layer (`core.output`). Only `prepare` writes datasets.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
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
from core.location import Location
from core.output import OutputFolder

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


def manifest_bytes(manifest: DatasetManifest) -> bytes:
    """The manifest's file as the commit writes it (`storage.write_json`'s form)."""
    return storage.json_bytes(manifest.dump())


def folder(data_dir: storage.Where, *, what: str = "dataset_dir") -> OutputFolder:
    """The dataset's output folder (`core.output`): in a store, built under an attempt prefix and committed by
    its manifest, because Beam's workers write the shards straight into the store."""
    return OutputFolder(data_dir, DatasetKind(what), attempts=True)


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


class DatasetKind:
    """A prepared dataset as an output kind (`core.output.Kind`): the files its manifest names with config.yaml
    and spm.vocab beside them; a store's attempt prefixes, each marked as staging and holding only what a run
    writes there (the current dataset's and those of crashed runs); the teacher embeddings computed from it
    (`core.teacher`), which go with it."""

    marker = MANIFEST
    advice = "choose a new or empty directory for the dataset, or move those files away"

    def __init__(self, what: str = "dataset_dir") -> None:
        self.what = what

    def ours(self, data_dir: Location) -> Callable[[str], bool]:
        manifest = None
        if (data_dir / MANIFEST).exists():
            try:
                manifest = load_manifest(str(data_dir))
            except DatasetError as exc:
                raise ownership.ForeignDataError(
                    f"{self.what}: {data_dir} holds a manifest.json that is not an interlingua dataset's ({exc}); "
                    "it is never replaced: choose another directory"
                ) from None
        own = own_entries(manifest)
        staged = {name for name in data_dir.subdirectories() if ownership.is_staging(data_dir / name)}
        return lambda e: (
            e in own
            or (e.split("/")[0] in staged and _ATTEMPT_FILES.fullmatch(e) is not None)
            or teacher.ours(str(data_dir), e)
        )
