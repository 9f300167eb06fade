"""`.npy` arrays on a local disk, written whole and read or written by row range.

`save_array` is the one writer of an embedding block's array (`evaluation.store`), locally or at a URI: whole
or not at all.
`NpyFile` and `NpyWriter` read and write one large `.npy` by row range (the search's results).
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from core.location import Where


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


def save_array(location: Where, array: np.ndarray) -> str:
    """The `.npy` at `location` written whole or not at all, so that a killed writer leaves no half block under
    a block's name: `Location.replace_bytes` (locally a temporary name unique to this write, `<name>.tmp-<8 hex>`
    created with O_EXCL, renamed when whole; an object at a URI by one PUT). The sha256 of what was written."""
    from core.location import Location

    buffer = io.BytesIO()
    np.save(buffer, array)
    data = buffer.getvalue()
    Location.of(location).replace_bytes(data)
    return hashlib.sha256(data).hexdigest()
