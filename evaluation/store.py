"""Embeddings on disk in blocks, each with its completion record: the one format that `evaluate`
(`write_block` + `publish`), `embed` and `mine` (`save_block`, in `embed.corpus`) write and
`StoredEmbeddings` reads, from a local folder or a URI.

    <folder>/<lang>/part-NNNNN.npy       (n, D) the rows [start, start + n) of each language
    <folder>/part-NNNNN.json             the block's record, written after its arrays: name, rows, the sha256
                                         of each array, and the writer's own fields (evaluate: start, first and
                                         last key; embed: index, source, first_line, empty, fingerprint)
    <folder>/rows/part-NNNNN.parquet     optional (evaluate): key, <lang>_text, <lang>_hash of those rows
    <folder>/keys.json                   optional (evaluate): every key, in row order, for tools
    <folder>/manifest.json               written last: format, languages, dim, dtype, rows, columns (of the
                                         rows files; [] without), blocks (name, start, rows, sha256), meta
                                         (the writer's own: evaluate's model; embed's fingerprint, lang, empty,
                                         inputs, model, the blocks' sources, job, config)

Rows are aligned across languages (row i of every language is one tuple).
Evaluate's rows are in key order: its writer (the driver, as the embedding
actors return their batches) calls `write_block` on any batch of tuples, in any
order, into a staging folder; `publish` orders
the blocks by key, checks that they neither overlap nor repeat, names them
`part-NNNNN`, writes their records and the manifest and renames the staging
folder into place. Embed's rows are in input order, a block per planned range
of an input file, written in place by `save_block`, locally or at a URI (a
rerun skips a block whose record is there). Readers (`StoredEmbeddings.rows`, one search task
each) read only the blocks they need. A folder in the earlier format
(`interlingua-stored-embeddings/1`: no block records) is read alike.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from core import ownership, storage
from core.schema import wrong_fields
from evaluation.npy import NpyFile, save_array

FORMAT = "interlingua-stored-embeddings/2"
FORMATS = ("interlingua-stored-embeddings/1", FORMAT)  # /1: evaluate's, before block records
MANIFEST = "manifest.json"
ROWS = "rows"
KEYS = "keys.json"


class BlockRecord(BaseModel):
    """`<folder>/<name>.json`: one block's completion record, written after its arrays. Beside what every block
    has, the writer's own fields (evaluate's `start`, `first_key`, `last_key`; embed's `index`, `source`, `kind`,
    `first_line`, `empty`, `fingerprint`), left out of the file when unset."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    rows: int
    sha256: dict[str, str]  # lang -> the sha256 of <lang>/<name>.npy
    start: int | None = None
    first_key: str | None = None
    last_key: str | None = None
    index: int | None = None
    source: str | None = None
    kind: str | None = None
    first_line: int | None = None
    empty: int | None = None
    fingerprint: str | None = None


class BlockEntry(BaseModel):
    """A block as the manifest lists it (format /1's had no checksums)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    start: int
    rows: int
    sha256: dict[str, str] | None = None


class StoreManifest(BaseModel):
    """`<folder>/manifest.json`, written last. `meta` is the writer's own section, typed by the writer
    (evaluate: the model and the data searched; embed: `embed.corpus.EmbedMeta`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["interlingua-stored-embeddings/1", "interlingua-stored-embeddings/2"] = FORMATS[0]
    languages: list[str]
    dim: int
    dtype: str
    rows: int
    columns: list[str] | None = None  # of the rows files ([]: none); absent in format /1, which always had them
    blocks: list[BlockEntry]
    meta: dict[str, Any] = {}

    def rows_columns(self) -> list[str]:
        """The columns of the rows files ([] for a store of vectors only)."""
        if self.columns is not None:
            return list(self.columns)
        return ["key", *(f"{lang}_{c}" for lang in self.languages for c in ("text", "hash"))]


def block_name(index: int) -> str:
    """The name of the block `index` (0-based, in row order): its files are `<lang>/<name>.npy`, `<name>.json`."""
    return f"part-{index:05d}"


def text_hashes(texts: Sequence[str]) -> np.ndarray:
    """A 64-bit hash of each text (n,) uint64: equal texts, equal hashes (for `text_error`)."""
    return np.array([int.from_bytes(hashlib.blake2b(t.encode("utf-8"), digest_size=8).digest(), "little")
                     for t in texts], dtype=np.uint64)


def save_arrays(folder: storage.Location, name: str, arrays: Mapping[str, np.ndarray]) -> dict[str, str]:
    """Each language's (n, D) array as `<folder>/<lang>/<name>.npy` (local or a URI), whole or not at all
    (`save_array`); {lang: sha256}."""
    return {lang: save_array(storage.join(folder, lang, f"{name}.npy"), np.ascontiguousarray(array))
            for lang, array in arrays.items()}


def write_record(folder: storage.Location, record: BlockRecord) -> BlockRecord:
    """The block's record `<folder>/<name>.json`, replaced whole: the completion marker, written after the
    block's arrays (a reader or a rerun trusts a block only once its record is there)."""
    storage.write_json(storage.join(folder, f"{record.name}.json"), record.model_dump(exclude_none=True), indent=1)
    return record


def read_record(path: storage.Location) -> BlockRecord | None:
    """The block record at `path`; None when it is missing or not one (a block without its record is not done)."""
    try:
        return BlockRecord.model_validate_json(storage.read_bytes(path))
    except (OSError, ValidationError):
        return None


def save_block(folder: storage.Location, name: str, arrays: Mapping[str, np.ndarray], **fields: Any) -> BlockRecord:
    """One block written in place (a local folder or a URI): its arrays (`save_arrays`), then its record
    (name, rows, sha256 and the writer's `fields`)."""
    rows = {len(array) for array in arrays.values()}
    assert len(rows) == 1, f"block {name}: languages of unequal rows {rows}"
    return write_record(folder, BlockRecord(name=name, rows=rows.pop(), sha256=save_arrays(folder, name, arrays),
                                            **fields))


def make_manifest(records: Sequence[BlockRecord], *, languages: list[str], dim: int, dtype: str,
                  columns: Sequence[str] = (), meta: dict[str, Any] | None = None) -> StoreManifest:
    """The manifest of the blocks `records` (in row order): each block's start is the rows before it."""
    blocks, start = [], 0
    for record in records:
        blocks.append(BlockEntry(name=record.name, start=start, rows=record.rows, sha256=record.sha256))
        start += record.rows
    return StoreManifest(format=FORMAT, languages=list(languages), dim=int(dim), dtype=str(dtype), rows=start,
                         columns=list(columns), blocks=blocks, meta=meta or {})


def write_manifest(folder: storage.Location, manifest: StoreManifest) -> None:
    """The manifest, written last (replaced whole): the folder is a published store from then on."""
    storage.write_json(storage.join(folder, MANIFEST), manifest.model_dump(mode="json", exclude_none=True), indent=1)


def block_files(names: Iterable[str], languages: Iterable[str], *, rows: bool = False) -> set[str]:
    """The relative paths the blocks `names` consist of (their folders too): what a store's owner may
    replace. `rows`: with their rows files."""
    names, languages = list(names), list(languages)
    return ownership.with_parents([*(f"{n}.json" for n in names), *(f"{lang}/{n}.npy" for lang in languages
                                                                  for n in names),
                                 *((f"{ROWS}/{n}.parquet" for n in names) if rows else ())])


def write_block(staging: Path, keys: Sequence[str], embeddings: Mapping[str, np.ndarray],
                texts: Mapping[str, Sequence[str]]) -> BlockRecord:
    """Write one batch of tuples (any order; sorted here by key) into `staging`; returns its record
    (name, rows, sha256, first_key, last_key) for `publish`. Rewriting the same batch gives the same files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    order = np.argsort(np.asarray(keys, dtype=object), kind="stable")
    keys = [keys[i] for i in order]
    name = "block-" + hashlib.blake2b(keys[0].encode("utf-8"), digest_size=8).hexdigest()
    sha256 = save_arrays(staging, name, {lang: emb[order] for lang, emb in embeddings.items()})
    columns: dict[str, Any] = {"key": pa.array(keys, pa.string())}
    for lang, values in texts.items():
        ordered = [values[i] for i in order]
        columns[f"{lang}_text"] = pa.array(ordered, pa.string())
        columns[f"{lang}_hash"] = pa.array(text_hashes(ordered), pa.uint64())
    path = staging / ROWS / f"{name}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path.with_suffix(".tmp"))
    os.replace(path.with_suffix(".tmp"), path)
    return BlockRecord(name=name, rows=len(keys), sha256=sha256, first_key=keys[0], last_key=keys[-1])


def publish(staging: Path, folder: Path, records: list[BlockRecord], *, languages: list[str],
            meta: dict[str, Any] | None = None) -> StoredEmbeddings:
    """Order the written blocks by key, name them part-NNNNN, write their records and the manifest and swap
    `staging` into `folder` (a previous folder stays whole until then). AssertionError if blocks overlap."""
    records = sorted(records, key=lambda r: r.first_key)
    for before, after in zip(records, records[1:]):
        assert before.last_key < after.first_key, f"blocks overlap: {before} {after}"
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
    write_manifest(staging, make_manifest(named, languages=languages, dim=first.shape[1], dtype=first.dtype,
                                          columns=columns, meta=meta))
    _write_keys(staging, [r.name for r in named])
    ownership.swap_in(staging, folder, check_replaceable(folder) if folder.exists() else None)
    return StoredEmbeddings.open(folder)


def read_manifest(folder: storage.Location) -> StoreManifest | None:
    """The folder's manifest when it is a stored-embeddings manifest (either format), else None."""
    try:
        return StoreManifest.model_validate_json(storage.read_bytes(storage.join(folder, MANIFEST)))
    except (OSError, ValidationError):
        return None


def check_replaceable(folder: Path) -> list[str]:
    """The entries of an embeddings folder once each is one `publish` wrote (what its manifest names);
    ForeignDataError naming the others, which are never removed."""
    ours = {ownership.STAGING_MARKER}
    manifest = read_manifest(folder)
    if manifest is not None:
        ours |= {MANIFEST, KEYS} | block_files([b.name for b in manifest.blocks], manifest.languages, rows=True)
    return ownership.check_only_ours(folder, lambda e: e in ours, what="embeddings folder",
                                   advice="move those files out of it; interlingua replaces only its own embeddings")


class NoRowsError(LookupError):
    """A rows column asked of a store written without rows files (`interlingua embed`'s: vectors only)."""


@dataclass(frozen=True)
class StoredEmbeddings:
    """A published embeddings folder (local, or a URI), opened by its manifest; small and picklable, so a
    Ray task gets the handle and reads its own rows."""

    folder: Path | str  # a URI stays a str
    languages: list[str]
    dim: int
    dtype: str
    starts: tuple[int, ...]  # block i holds rows [starts[i], starts[i + 1]); the last is the row count
    names: tuple[str, ...]
    meta: dict[str, Any] = field(default_factory=dict)
    columns: tuple[str, ...] = ()  # of the rows files; () when there are none

    @classmethod
    def open(cls, folder: str | Path) -> StoredEmbeddings:
        """FileNotFoundError when `folder` holds no published embeddings; ValueError naming the manifest's
        fields when it is not a stored-embeddings manifest."""
        folder = str(folder) if storage.is_uri(folder) else Path(folder)
        path = storage.join(folder, MANIFEST)
        try:
            manifest = StoreManifest.model_validate_json(storage.read_bytes(path))
        except ValidationError as exc:
            raise ValueError(f"{path}: not a stored-embeddings manifest ({wrong_fields(exc)})") from None
        blocks = manifest.blocks
        return cls(folder, list(manifest.languages), manifest.dim, manifest.dtype,
                   tuple(b.start for b in blocks) + (manifest.rows,), tuple(b.name for b in blocks),
                   dict(manifest.meta), tuple(manifest.rows_columns()))

    def __len__(self) -> int:
        return self.starts[-1]

    def _spans(self, start: int, stop: int) -> Iterator[tuple[str, int, int]]:
        """(block name, first row, end row) within each block that [start, stop) touches."""
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        for i in range(max(first, 0), len(self.names)):
            lo, hi = self.starts[i], self.starts[i + 1]
            if lo >= stop:
                break
            yield self.names[i], max(start, lo) - lo, min(stop, hi) - lo

    def _read(self, lang: str, name: str, a: int, b: int) -> np.ndarray:
        """Rows [a, b) of one block: mapped from a local file; a URI's block read whole through the store."""
        if isinstance(self.folder, Path):
            return NpyFile(self.folder / lang / f"{name}.npy")[a:b]
        return np.load(io.BytesIO(storage.read_bytes(storage.join(self.folder, lang, f"{name}.npy"))))[a:b]

    def rows(self, lang: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Rows [start, stop) of one language (stop - start, D), read from the blocks they lie in; every row
        by default."""
        if lang not in self.languages:
            raise KeyError(f"{self.folder}: no embeddings of {lang!r} (has {self.languages})")
        stop = len(self) if stop is None else stop
        parts = [self._read(lang, name, a, b) for name, a, b in self._spans(start, stop)]
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), self.dtype)

    def blocks(self, lang: str) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, (n, D) rows) of every stored block of one language, read one at a time."""
        for start, stop in zip(self.starts, self.starts[1:]):
            yield start, self.rows(lang, start, stop)

    def column(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Rows [start, stop) of a rows column: `key`, `<lang>_text` (object arrays), `<lang>_hash`.
        NoRowsError when the store has no such column (embed's stores hold vectors only)."""
        if name not in self.columns:
            raise NoRowsError(f"{self.folder}: these embeddings hold no column {name!r} (they hold "
                              f"{list(self.columns) or 'vectors only, in input order'})")
        stop = len(self) if stop is None else stop
        parts = [storage.open_parquet(storage.join(self.folder, ROWS, f"{block}.parquet")).read(columns=[name])[
            name][a:b].to_numpy(zero_copy_only=False) for block, a, b in self._spans(start, stop)]
        return np.concatenate(parts) if parts else np.zeros(0, object)

    def hashes(self) -> Mapping[str, np.ndarray]:
        """{lang: (S,) uint64 text hashes}, each read when asked for (one language held at a time)."""
        missing = [lang for lang in self.languages if f"{lang}_hash" not in self.columns]
        if missing:
            raise NoRowsError(f"{self.folder}: these embeddings hold no text hashes of {missing}")
        return _HashColumns(self)


class _HashColumns(Mapping):
    def __init__(self, store: StoredEmbeddings) -> None:
        self.store = store

    def __getitem__(self, lang: str) -> np.ndarray:
        return self.store.column(f"{lang}_hash")

    def __iter__(self):
        return iter(self.store.languages)

    def __len__(self) -> int:
        return len(self.store.languages)


def _write_keys(folder: Path, names: list[str]) -> None:
    """keys.json, a JSON list of every key, written one block at a time."""
    import pyarrow.parquet as pq

    with open(folder / KEYS, "w") as out:
        out.write("[")
        for i, name in enumerate(names):
            keys = pq.read_table(folder / ROWS / f"{name}.parquet", columns=["key"])["key"].to_pylist()
            out.write(("," if i else "") + json.dumps(keys)[1:-1])
        out.write("]\n")
