"""Embeddings on disk in blocks, each with its completion record: the one format that `evaluate`
(`write_block` + `finish`), `embed` and `mine` (`save_block`, in `embed.corpus`) write
(`evaluation.store_writer`) and `StoredEmbeddings` reads, from a local folder or a URI.

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
order, into a staging folder; `finish` orders the blocks by key, checks that
they neither overlap nor repeat, names them `part-NNNNN` and writes their
records, and the commit writes the manifest and renames the staging folder into
place (`store_writer.output`, `core.output`). Embed's rows are in input order,
a block per planned range of an input file, written in place by `save_block`,
locally or at a URI (a rerun skips a block whose record is there). Readers
(`StoredEmbeddings.rows`, one search task each) read only the blocks they need. A folder in the earlier format
(`interlingua-stored-embeddings/1`: no block records) is read alike.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from core import ownership, storage
from core.boundary import Segment, check_no_links, check_regular_file
from core.location import Location
from core.schema import wrong_fields
from evaluation.npy import NpyFile

FORMAT: Final = "interlingua-stored-embeddings/2"
FORMATS: Final = ("interlingua-stored-embeddings/1", FORMAT)  # /1: evaluate's, before block records
MANIFEST = "manifest.json"
ROWS = "rows"
KEYS = "keys.json"


class BlockRecord(BaseModel):
    """`<folder>/<name>.json`: one block's completion record, written after its arrays. Beside what every block
    has, the writer's own fields (evaluate's `start`, `first_key`, `last_key`; embed's `index`, `source`, `kind`,
    `first_line`, `empty`, `fingerprint`), left out of the file when unset."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: Segment
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

    name: Segment
    start: int
    rows: int
    sha256: dict[str, str] | None = None


class StoreManifest(BaseModel):
    """`<folder>/manifest.json`, written last. `meta` is the writer's own section, typed by the writer:
    evaluate's `EmbeddingsMeta`, embed's `orchestration.embed.folder.EmbedMeta`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["interlingua-stored-embeddings/1", "interlingua-stored-embeddings/2"] = FORMATS[0]
    languages: list[Segment]
    dim: int
    dtype: str
    rows: int
    columns: list[str] | None = None  # of the rows files ([]: none); absent in format /1, which always had them
    blocks: list[BlockEntry]
    meta: dict[str, JsonValue] = {}

    def rows_columns(self) -> list[str]:
        """The columns of the rows files ([] for a store of vectors only)."""
        if self.columns is not None:
            return list(self.columns)
        return ["key", *(f"{lang}_{c}" for lang in self.languages for c in ("text", "hash"))]


class EmbeddingsMeta(BaseModel):
    """evaluate's section (`meta`) of the manifest of the embeddings it stores: which model embedded which data,
    so that `embed.search` knows them for its model's or another's."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    model: str  # the model file's sha256, or the baseline's name (`job.model_identity`)
    split: str  # the split or test set embedded
    data: str  # what was embedded: the dataset's fingerprint, or the test set's
    backend: str = "torch"  # the engine that ran the model (absent before engines were chosen: torch)


def block_name(index: int) -> str:
    """The name of the block `index` (0-based, in row order): its files are `<lang>/<name>.npy`, `<name>.json`."""
    return f"part-{index:05d}"


def read_record(path: storage.Where) -> BlockRecord | None:
    """The block record at `path`; None when it is missing or not one (a block without its record is not done)."""
    try:
        return BlockRecord.model_validate_json(storage.read_bytes(path))
    except (OSError, ValidationError):
        return None


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


def read_manifest(folder: storage.Where) -> StoreManifest | None:
    """The folder's manifest when it is a stored-embeddings manifest (either format), else None."""
    try:
        return StoreManifest.model_validate_json(storage.read_bytes(storage.join(folder, MANIFEST)))
    except (OSError, ValidationError):
        return None


def _check_files(folder: Path, manifest: StoreManifest) -> None:
    """BoundaryError naming the first file the manifest names (a block's array per language, its rows file
    when the store has them) that is a FIFO, a device, a directory, a link or of an over-long name: found by
    `os.lstat`, none opened. Locally only: a store holds objects, and a look per block costs a round trip."""
    with_rows = bool(manifest.rows_columns())
    for block in manifest.blocks:
        rows = [f"{ROWS}/{block.name}.parquet"] if with_rows else []
        for name in [*(f"{lang}/{block.name}.npy" for lang in manifest.languages), *rows]:
            check_regular_file(storage.join(folder, name), MANIFEST)


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
    meta: dict[str, JsonValue] = field(default_factory=dict)
    columns: tuple[str, ...] = ()  # of the rows files; () when there are none

    @classmethod
    def open(cls, folder: str | Path) -> StoredEmbeddings:
        """FileNotFoundError when `folder` holds no published embeddings; ValueError naming the manifest's
        fields when it is not a stored-embeddings manifest; BoundaryError (a ValueError) when a local folder's
        manifest, or a file it names, is not a regular file (`_check_files`), before any is read."""
        location = Location.of(folder, "the embeddings folder")
        folder = location.local_path or str(location)
        path = storage.join(folder, MANIFEST)
        check_no_links(folder, "the embeddings folder")
        if isinstance(folder, Path):
            check_regular_file(path, f"the embeddings folder {folder}")
        try:
            manifest = StoreManifest.model_validate_json(storage.read_bytes(path))
        except ValidationError as exc:
            raise ValueError(f"{path}: not a stored-embeddings manifest ({wrong_fields(exc)})") from None
        if isinstance(folder, Path):
            _check_files(folder, manifest)
        blocks = manifest.blocks
        return cls(
            folder,
            list(manifest.languages),
            manifest.dim,
            manifest.dtype,
            tuple(b.start for b in blocks) + (manifest.rows,),
            tuple(b.name for b in blocks),
            dict(manifest.meta),
            tuple(manifest.rows_columns()),
        )

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
            raise NoRowsError(
                f"{self.folder}: these embeddings hold no column {name!r} (they hold "
                f"{list(self.columns) or 'vectors only, in input order'})"
            )
        stop = len(self) if stop is None else stop
        parts = [
            storage.open_parquet(storage.join(self.folder, ROWS, f"{block}.parquet"))
            .read(columns=[name])[name][a:b]
            .to_numpy(zero_copy_only=False)
            for block, a, b in self._spans(start, stop)
        ]
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
