"""Embeddings on disk, written block by block and read by row range, so no process holds a split.

    <folder>/manifest.json               languages, dim, dtype, rows, blocks (name, start, rows), meta
    <folder>/<lang>/part-NNNNN.npy       (n, D) the rows [start, start + n) of every language
    <folder>/rows/part-NNNNN.parquet     key, <lang>_text, <lang>_hash (uint64 of the text) of those rows
    <folder>/keys.json                   every key, in row order (for tools; written block by block)

Rows are in key order and aligned across languages (row i of every language is
one tuple). Writers (Ray Data tasks) call `write_block` on any batch of
tuples, in any order and on any machine that sees the folder; `publish`
orders the blocks by key, checks that they neither overlap nor repeat, names
them `part-NNNNN` and renames the staging folder into place. Readers
(`StoredEmbeddings.rows`, one search task each) map only the blocks they need.
`NpyFile` and `NpyWriter` read and write one large `.npy` by row range.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from core import storage

FORMAT = "interlingua-stored-embeddings/1"
MANIFEST = "manifest.json"
ROWS = "rows"
KEYS = "keys.json"


def text_hashes(texts: Sequence[str]) -> np.ndarray:
    """A 64-bit hash of each text (n,) uint64: equal texts, equal hashes (for `text_error`)."""
    return np.array([int.from_bytes(hashlib.blake2b(t.encode("utf-8"), digest_size=8).digest(), "little")
                     for t in texts], dtype=np.uint64)


def write_block(staging: Path, keys: Sequence[str], embeddings: Mapping[str, np.ndarray],
                texts: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """Write one batch of tuples (any order; sorted here by key) into `staging`; returns its record
    {name, rows, first_key, last_key} for `publish`. Rewriting the same batch gives the same files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    order = np.argsort(np.asarray(keys, dtype=object), kind="stable")
    keys = [keys[i] for i in order]
    name = "block-" + hashlib.blake2b(keys[0].encode("utf-8"), digest_size=8).hexdigest()
    for lang, emb in embeddings.items():
        save_array(staging / lang / f"{name}.npy", np.ascontiguousarray(emb[order]))  # (n, D)
    columns: dict[str, Any] = {"key": pa.array(keys, pa.string())}
    for lang, values in texts.items():
        ordered = [values[i] for i in order]
        columns[f"{lang}_text"] = pa.array(ordered, pa.string())
        columns[f"{lang}_hash"] = pa.array(text_hashes(ordered), pa.uint64())
    path = staging / ROWS / f"{name}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path.with_suffix(".tmp"))
    os.replace(path.with_suffix(".tmp"), path)
    return {"name": name, "rows": len(keys), "first_key": keys[0], "last_key": keys[-1]}


def publish(staging: Path, folder: Path, records: list[dict[str, Any]], *, languages: list[str],
            meta: dict[str, Any] | None = None) -> StoredEmbeddings:
    """Order the written blocks by key, name them part-NNNNN, write the manifest and swap `staging`
    into `folder` (a previous folder stays whole until then). AssertionError if blocks overlap."""
    records = sorted(records, key=lambda r: r["first_key"])
    for before, after in zip(records, records[1:]):
        assert before["last_key"] < after["first_key"], f"blocks overlap: {before} {after}"
    blocks, start = [], 0
    for i, record in enumerate(records):
        new = f"part-{i:05d}"
        for sub in [*languages, ROWS]:
            suffix = ".parquet" if sub == ROWS else ".npy"
            os.replace(staging / sub / f"{record['name']}{suffix}", staging / sub / f"{new}{suffix}")
        blocks.append({"name": new, "start": start, "rows": record["rows"]})
        start += record["rows"]
    first = np.load(staging / languages[0] / f"{blocks[0]['name']}.npy", mmap_mode="r")
    manifest = {"format": FORMAT, "languages": languages, "dim": int(first.shape[1]), "dtype": str(first.dtype),
                "rows": start, "blocks": blocks, "meta": meta or {}}
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    _write_keys(staging, [b["name"] for b in blocks])
    storage.swap_in(staging, folder, check_replaceable(folder) if folder.exists() else None)
    return StoredEmbeddings.open(folder)


def check_replaceable(folder: Path) -> list[str]:
    """The entries of an embeddings folder once each is one `publish` wrote (what its manifest names);
    ForeignDataError naming the others, which are never removed."""
    ours = {storage.STAGING_MARKER}
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        manifest = None
    if isinstance(manifest, dict) and manifest.get("format", FORMAT) == FORMAT and "blocks" in manifest:
        names = [b["name"] for b in manifest["blocks"]]
        ours |= storage.with_parents([MANIFEST, KEYS, *(f"{ROWS}/{n}.parquet" for n in names),
                                      *(f"{lang}/{n}.npy" for lang in manifest.get("languages", []) for n in names)])
    return storage.check_only_ours(folder, lambda e: e in ours, what="embeddings folder",
                                   advice="move those files out of it; interlingua replaces only its own embeddings")


@dataclass(frozen=True)
class StoredEmbeddings:
    """A published embeddings folder, opened by its manifest; small and picklable, so a Ray task
    gets the handle and reads its own rows."""

    folder: Path
    languages: list[str]
    dim: int
    dtype: str
    starts: tuple[int, ...]  # block i holds rows [starts[i], starts[i + 1]); the last is the row count
    names: tuple[str, ...]
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, folder: str | Path) -> StoredEmbeddings:
        """FileNotFoundError when `folder` holds no published embeddings."""
        folder = Path(folder)
        manifest = json.loads((folder / MANIFEST).read_text())
        blocks = manifest["blocks"]
        return cls(folder, manifest["languages"], manifest["dim"], manifest["dtype"],
                   tuple(b["start"] for b in blocks) + (manifest["rows"],), tuple(b["name"] for b in blocks),
                   manifest.get("meta", {}))

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

    def rows(self, lang: str, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) of one language (stop - start, D), read from the blocks they lie in."""
        if lang not in self.languages:
            raise KeyError(f"{self.folder}: no embeddings of {lang!r} (has {self.languages})")
        parts = [NpyFile(self.folder / lang / f"{name}.npy")[a:b] for name, a, b in self._spans(start, stop)]
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), self.dtype)

    def blocks(self, lang: str) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, (n, D) rows) of every stored block of one language, read one at a time."""
        for start, stop in zip(self.starts, self.starts[1:]):
            yield start, self.rows(lang, start, stop)

    def column(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Rows [start, stop) of a rows column: `key`, `<lang>_text` (object arrays), `<lang>_hash`."""
        import pyarrow.parquet as pq

        stop = len(self) if stop is None else stop
        parts = [pq.read_table(self.folder / ROWS / f"{block}.parquet", columns=[name])[name][a:b].to_numpy(
            zero_copy_only=False) for block, a, b in self._spans(start, stop)]
        return np.concatenate(parts) if parts else np.zeros(0, object)

    def hashes(self) -> Mapping[str, np.ndarray]:
        """{lang: (S,) uint64 text hashes}, each read when asked for (one language held at a time)."""
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


class NpyFile:
    """A `.npy` array read by row ranges: each read maps the file anew and copies the rows out, so
    the reader's memory holds only what it read."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        mapped = np.load(self.path, mmap_mode="r")
        self.shape, self.dtype = mapped.shape, mapped.dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: slice) -> np.ndarray:
        mapped = np.load(self.path, mmap_mode="r")
        try:
            return np.array(mapped[rows])
        finally:
            del mapped


class NpyWriter:
    """A `.npy` file of a known shape, filled by row ranges in any order (written, never mapped)."""

    def __init__(self, path: str | Path, shape: tuple[int, ...], dtype: Any) -> None:
        self.path, self.shape, self.dtype = Path(path), shape, np.dtype(dtype)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        created = np.lib.format.open_memmap(self.path, mode="w+", dtype=self.dtype, shape=shape)
        self.offset = created.offset
        del created
        self.row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * self.dtype.itemsize

    def write(self, start: int, rows: np.ndarray) -> None:
        assert rows.shape[1:] == self.shape[1:] and start + len(rows) <= self.shape[0], (rows.shape, start)
        with open(self.path, "r+b") as handle:
            handle.seek(self.offset + start * self.row_bytes)
            handle.write(np.ascontiguousarray(rows, dtype=self.dtype).tobytes())


def _write_keys(folder: Path, names: list[str]) -> None:
    """keys.json, a JSON list of every key, written one block at a time."""
    import pyarrow.parquet as pq

    with open(folder / KEYS, "w") as out:
        out.write("[")
        for i, name in enumerate(names):
            keys = pq.read_table(folder / ROWS / f"{name}.parquet", columns=["key"])["key"].to_pylist()
            out.write(("," if i else "") + json.dumps(keys)[1:-1])
        out.write("]\n")


def save_array(path: Path, array: np.ndarray) -> None:
    """`path` (.npy) written under a temporary name and renamed when whole: a killed writer leaves no half
    block under a block's name. Every embedding block is written by it (this store's, `serve.corpus`'s)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, array)
    os.replace(tmp, path)
