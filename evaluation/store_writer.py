"""Writing stored embeddings (`evaluation.store`, the format): a block's arrays and record, evaluate's
batches and the files that finish them, a manifest, and the store as an output kind (`StoreKind`: what a folder
of them may hold; committed by the output layer, `core.output`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import JsonValue

from core import ownership
from core.location import Location, Where, json_bytes
from core.output import OutputFolder
from evaluation.npy import save_array
from evaluation.store import (
    FORMAT,
    KEYS,
    MANIFEST,
    ROWS,
    BlockEntry,
    BlockRecord,
    StoreManifest,
    block_name,
    read_manifest,
)


def text_hashes(texts: Sequence[str]) -> np.ndarray:
    """A 64-bit hash of each text (n,) uint64: equal texts, equal hashes (for `text_error`)."""
    return np.array(
        [int.from_bytes(hashlib.blake2b(t.encode("utf-8"), digest_size=8).digest(), "little") for t in texts],
        dtype=np.uint64,
    )


def save_arrays(folder: Where, name: str, arrays: Mapping[str, np.ndarray]) -> dict[str, str]:
    """Each language's (n, D) array as `<folder>/<lang>/<name>.npy` (local or a URI), whole or not at all
    (`save_array`); {lang: sha256}."""
    location = Location.of(folder)
    return {
        lang: save_array(location.join(lang, f"{name}.npy"), np.ascontiguousarray(array))
        for lang, array in arrays.items()
    }


def block_files(names: Iterable[str], languages: Iterable[str], *, rows: bool = False) -> set[str]:
    """The relative paths the blocks `names` consist of (their folders too): what a store's owner may
    replace. `rows`: with their rows files."""
    names, languages = list(names), list(languages)
    return ownership.with_parents(
        [
            *(f"{n}.json" for n in names),
            *(f"{lang}/{n}.npy" for lang in languages for n in names),
            *((f"{ROWS}/{n}.parquet" for n in names) if rows else ()),
        ]
    )


def write_record(folder: Where, record: BlockRecord) -> BlockRecord:
    """The block's record `<folder>/<name>.json`, replaced whole: the completion marker, written after the
    block's arrays (a reader or a rerun trusts a block only once its record is there)."""
    Location.of(folder).join(f"{record.name}.json").write_json(record.model_dump(exclude_none=True), indent=1)
    return record


def save_block(folder: Where, name: str, arrays: Mapping[str, np.ndarray], **fields: Any) -> BlockRecord:
    """One block written in place (a local folder or a URI): its arrays (`save_arrays`), then its record
    (name, rows, sha256 and the writer's `fields`)."""
    rows = {len(array) for array in arrays.values()}
    assert len(rows) == 1, f"block {name}: languages of unequal rows {rows}"
    return write_record(
        folder, BlockRecord(name=name, rows=rows.pop(), sha256=save_arrays(folder, name, arrays), **fields)
    )


def make_manifest(
    records: Sequence[BlockRecord],
    *,
    languages: list[str],
    dim: int,
    dtype: str,
    columns: Sequence[str] = (),
    meta: Mapping[str, JsonValue] | None = None,
) -> StoreManifest:
    """The manifest of the blocks `records` (in row order): each block's start is the rows before it."""
    blocks, start = [], 0
    for record in records:
        blocks.append(
            BlockEntry(
                name=record.name, start=start, rows=record.rows, sha256=record.sha256, rows_sha256=record.rows_sha256
            )
        )
        start += record.rows
    return StoreManifest(
        format=FORMAT,
        languages=list(languages),
        dim=int(dim),
        dtype=str(dtype),
        rows=start,
        columns=list(columns),
        blocks=blocks,
        meta=dict(meta or {}),
    )


def manifest_bytes(manifest: StoreManifest) -> bytes:
    """The manifest's file as it is written (`Location.write_json`'s form, indented by 1)."""
    return json_bytes(manifest.model_dump(mode="json", exclude_none=True), indent=1)


def write_block(
    staging: Path, keys: Sequence[str], embeddings: Mapping[str, np.ndarray], texts: Mapping[str, Sequence[str]]
) -> BlockRecord:
    """Write one batch of tuples (any order; sorted here by key) into `staging`; returns its record
    (name, rows, sha256, rows_sha256, first_key, last_key) for `finish`. Rewriting the same batch gives the
    same files. The rows file is written whole or not at all, like the arrays, and hashed as written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    order = np.argsort(np.asarray(keys, dtype=object), kind="stable")
    keys = [keys[i] for i in order]
    name = "block-" + hashlib.blake2b(keys[0].encode("utf-8"), digest_size=8).hexdigest()
    sha256 = save_arrays(staging, name, {lang: emb[order] for lang, emb in embeddings.items()})
    columns: dict[str, pa.Array] = {"key": pa.array(keys, pa.string())}
    for lang, values in texts.items():
        ordered = [values[i] for i in order]
        columns[f"{lang}_text"] = pa.array(ordered, pa.string())
        columns[f"{lang}_hash"] = pa.array(text_hashes(ordered), pa.uint64())
    buffer = pa.BufferOutputStream()
    pq.write_table(pa.table(columns), buffer)
    data = buffer.getvalue().to_pybytes()
    Location.of(staging).join(ROWS, f"{name}.parquet").replace_bytes(data)
    return BlockRecord(
        name=name,
        rows=len(keys),
        sha256=sha256,
        rows_sha256=hashlib.sha256(data).hexdigest(),
        first_key=keys[0],
        last_key=keys[-1],
    )


def _key_range(record: BlockRecord) -> tuple[str, str]:
    """(first key, last key) of a key-ordered block (`write_block` records both)."""
    assert record.first_key is not None and record.last_key is not None, record
    return record.first_key, record.last_key


def finish(
    staging: Path, records: list[BlockRecord], *, languages: list[str], meta: Mapping[str, JsonValue] | None = None
) -> bytes:
    """The rest of a store staged by `write_block`, once its blocks are all there: the blocks ordered by key
    and named part-NNNNN, their records and keys.json, written into `staging`; returns the manifest, which the
    commit writes last (`output(folder).commit(staging, finish(...))`). AssertionError if blocks overlap."""
    records = sorted(records, key=lambda r: _key_range(r)[0])
    for before, after in zip(records, records[1:]):
        assert _key_range(before)[1] < _key_range(after)[0], f"blocks overlap: {before} {after}"
    named, start = [], 0
    for i, record in enumerate(records):
        new = block_name(i)
        for sub in [*languages, ROWS]:
            suffix = ".parquet" if sub == ROWS else ".npy"
            os.replace(staging / sub / f"{record.name}{suffix}", staging / sub / f"{new}{suffix}")
        named.append(write_record(staging, record.model_copy(update={"name": new, "start": start})))
        start += record.rows
    first = np.load(staging / languages[0] / f"{named[0].name}.npy", mmap_mode="r")
    columns = ["key", *(f"{lang}_{c}" for lang in languages for c in ("text", "hash"))]
    _write_keys(staging, [r.name for r in named])
    return manifest_bytes(
        make_manifest(named, languages=languages, dim=first.shape[1], dtype=first.dtype, columns=columns, meta=meta)
    )


class StoreKind:
    """Stored embeddings as an output kind (`core.output.Kind`): what their manifest names (the blocks' arrays,
    records and rows files, keys.json), and a staging folder's marker. Evaluate stages a store with
    `write_block`, `finish`es it and commits it (`output`); a previous store stays whole until then."""

    what = "embeddings folder"
    marker = MANIFEST
    advice = "move those files out of it; interlingua replaces only its own embeddings"

    def ours(self, folder: Location) -> Callable[[str], bool]:
        ours = {ownership.STAGING_MARKER}
        manifest = read_manifest(folder)
        if manifest is not None:
            ours |= {MANIFEST, KEYS} | block_files([b.name for b in manifest.blocks], manifest.languages, rows=True)
        return lambda e: e in ours


def output(folder: Where) -> OutputFolder:
    """The stored embeddings at `folder` as an output (`core.output`): `check_replaceable()` (ForeignDataError
    naming what the manifest does not), `stage()`, `commit()`, `discard()`."""
    return OutputFolder(folder, StoreKind())


def _write_keys(folder: Path, names: list[str]) -> None:
    """keys.json, a JSON list of every key, written one block at a time."""
    import pyarrow.parquet as pq

    with open(folder / KEYS, "w") as out:
        out.write("[")
        for i, name in enumerate(names):
            keys = pq.read_table(folder / ROWS / f"{name}.parquet", columns=["key"])["key"].to_pylist()
            out.write(("," if i else "") + json.dumps(keys)[1:-1])
        out.write("]\n")
