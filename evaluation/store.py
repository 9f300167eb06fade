"""Stored embeddings read back (`StoredEmbeddings`), from a local folder or a URI; their format, and the
names of its files, are `evaluation.store_format`'s (imported from here by every reader and writer).

Every file a result is read from is verified against the sha256 its manifest records (`StoredEmbeddings.open`):
locally, where arrays are mapped and rows files read by ranges, each is hashed once per open, before use; at a
URI, where a file is read whole, the bytes read are hashed and loaded from. A mismatch is a `StoreError` naming
the file and the manifest. Earlier formats are read alike: `/2` records no sha256 of the rows files, `/1` has
no block records nor checksums.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import JsonValue, ValidationError

from core.boundary import check_no_links
from core.location import Location
from core.regular import check_regular_file
from core.schema import wrong_fields
from evaluation.npy import NpyFile
from evaluation.store_format import ADVICE, MANIFEST, ROWS, StoreError, StoreManifest, named_files

# the format's other names, which its readers and writers import from here
from evaluation.store_format import BLOCK_FORMATS as BLOCK_FORMATS
from evaluation.store_format import FORMAT as FORMAT
from evaluation.store_format import FORMATS as FORMATS
from evaluation.store_format import KEYS as KEYS
from evaluation.store_format import BlockEntry as BlockEntry
from evaluation.store_format import BlockRecord as BlockRecord
from evaluation.store_format import EmbeddingsMeta as EmbeddingsMeta
from evaluation.store_format import block_name as block_name
from evaluation.store_format import read_manifest as read_manifest
from evaluation.store_format import read_record as read_record


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
    sha256: dict[str, str] = field(default_factory=dict)  # relative path -> its sha256 (`named_files`)

    @classmethod
    def open(cls, folder: str | Path) -> StoredEmbeddings:
        """FileNotFoundError when `folder` holds no published embeddings; ValueError naming the manifest's
        fields when it is not a stored-embeddings manifest; BoundaryError (a ValueError) when a local folder's
        manifest, or a file it names, is not a regular file, before any is read; StoreError when a local
        folder's file differs from the sha256 the manifest records (each hashed here, once), or the manifest
        lacks one (`named_files`)."""
        location = Location.of(folder, "the embeddings folder")
        path = location / MANIFEST
        check_no_links(location, "the embeddings folder")
        if location.on_this_host:
            check_regular_file(path, f"the embeddings folder {location}")
        try:
            manifest = StoreManifest.model_validate_json(path.read_bytes())
        except ValidationError as exc:
            raise ValueError(f"{path}: not a stored-embeddings manifest ({wrong_fields(exc)})") from None
        files = named_files(manifest, path.text)
        if location.on_this_host:  # a store holds objects, and a look per block costs a round trip
            for name in files:  # FIFOs, devices, folders, links and over-long names refused, none opened
                check_regular_file(location.join(name), MANIFEST)
            for name, sha256 in files.items():  # then each hashed once: the reads map them
                if sha256 is not None:
                    location.join(name).verify_sha256(sha256, named_in=path.text, error=StoreError, advice=ADVICE)
        blocks = manifest.blocks
        return cls(
            location.local_path or location.text,
            list(manifest.languages),
            manifest.dim,
            manifest.dtype,
            tuple(b.start for b in blocks) + (manifest.rows,),
            tuple(b.name for b in blocks),
            dict(manifest.meta),
            tuple(manifest.rows_columns()),
            {name: sha256 for name, sha256 in files.items() if sha256 is not None},
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

    @property
    def _location(self) -> Location:
        return Location.of(self.folder, "the embeddings folder")

    def _read(self, lang: str, name: str, a: int, b: int) -> np.ndarray:
        """Rows [a, b) of one block: mapped from a local file (verified by `open`); a URI's block read whole
        through the store, and loaded from the bytes read once they are verified."""
        block = self._location.join(lang, f"{name}.npy")
        if block.on_this_host:
            return NpyFile(block.text)[a:b]
        return np.load(io.BytesIO(self._whole(f"{lang}/{name}.npy")))[a:b]

    def _whole(self, name: str) -> bytes:
        """The file `name` of a URI's store, read whole, once the bytes read have the sha256 the manifest
        records (StoreError otherwise, as `Location.verify_sha256` words it); an earlier format's unrecorded
        file as it is."""
        location = self._location.join(*name.split("/"))
        data, recorded = location.read_bytes(), self.sha256.get(name)
        if recorded is not None and (actual := hashlib.sha256(data).hexdigest()) != recorded:
            raise StoreError(
                f"{location}: sha256 {actual[:12]} differs from {recorded[:12]} in {self.folder}/{MANIFEST}: "
                f"the file is damaged or was replaced{ADVICE}"
            )
        return data

    def _rows_file(self, block: str, name: str):
        """The column `name` of one block's rows file (a pyarrow array): read by ranges from a local file
        (verified by `open`); a URI's read whole, and parsed from the bytes read once they are verified."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = self._location.join(ROWS, f"{block}.parquet")
        if rows.on_this_host:
            return rows.open_parquet().read(columns=[name])[name]
        return pq.read_table(pa.BufferReader(self._whole(f"{ROWS}/{block}.parquet")), columns=[name])[name]

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
            self._rows_file(block, name)[a:b].to_numpy(zero_copy_only=False) for block, a, b in self._spans(start, stop)
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
