"""`Location`: a file or folder in any filesystem the product reads and writes, as one value.

A location is what a user names (`run_dir`, `-o`, `--model`): a local path, or a URI whose scheme names a
filesystem (`s3://`, `gs://`, `hdfs://`, `file://`). It is parsed and checked once (`Location.of`), then
joined, read, written, listed and copied through the same methods whatever the filesystem: `pyarrow.fs`
underneath (`core.storage`), so a local folder is one more filesystem and no call site branches on a scheme.
The few things that differ are named for what they are, not for the scheme:

- `arrow()`: the (filesystem, path) pair that Ray Train, Ray Tune and pyarrow take;
- `renames`: whether an output can be staged beside its folder and swapped in by a rename (a local disk);
- `local_path`: the path on this host, None for a store (a library that can only open local files, and the
  policy checks that a location every host reaches is not one host's folder);
- `identity`: what two locations are compared by (links resolved), to tell one file or one inside another;
- `cached_copy()`: a verified local copy to read from (the folder itself, or a copy in this user's cache).

Why pyarrow.fs and not fsspec: docs/layout.md ("Locations").
"""

from __future__ import annotations

import fnmatch
import glob as shell
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from core import storage
from core.boundary import Located
from core.storage import StorageError, StoreUnreachable, Where, json_bytes

__all__ = ["Location", "StorageError", "StoreUnreachable", "Where", "json_bytes"]


@dataclass(frozen=True)
class Location:
    """A checked local path (absolute) or URI. `str(location)` is what messages show and what `of` reads back."""

    text: str

    @classmethod
    def of(cls, where: str | os.PathLike[str] | Located, what: str = "location") -> Location:
        """`where` checked (`storage.check_location`: StorageError naming `what` for an unknown scheme, a URI
        without its bucket, or a local path that looks like a URI), a local path made absolute."""
        if isinstance(where, Location):
            return where
        given = os.fspath(where) if isinstance(where, str | os.PathLike) else where.text
        text = storage.check_location(given, what)
        return cls(storage.absolute(text))

    def __str__(self) -> str:
        return self.text

    def __truediv__(self, name: str) -> Location:
        return self.join(name)

    def join(self, *parts: str) -> Location:
        """The location of `parts` under this one; each a relative name inside it (`core.boundary.check_name`:
        BoundaryError for `..`, an absolute path...)."""
        return Location(storage.join(self.text, *parts))

    @property
    def name(self) -> str:
        return self.text.rstrip("/").rsplit("/", 1)[-1]

    @property
    def parent(self) -> Location:
        return Location(self.text.rstrip("/").rsplit("/", 1)[0] or "/")

    def sibling(self, name: str) -> Location:
        """`name` beside this location (a staging folder, a lock)."""
        return self.parent.join(name)

    # --- what differs between filesystems, named for what it is -----------------------------------------
    @property
    def local_path(self) -> Path | None:
        """The path on this host; None for a location in a store."""
        return None if storage.is_uri(self.text) else Path(self.text)

    @property
    def on_this_host(self) -> bool:
        """Whether this is a path on this host alone: the other nodes of a cluster cannot reach it (a store, or
        a file:// path that every host mounts, they can)."""
        return self.local_path is not None

    @property
    def scheme(self) -> str:
        """The filesystem's name: "local" for a path on this host, else the URI's scheme ("s3", "file"...),
        for what differs by more than one property (a lock's lease: `orchestration.adapters.lock`)."""
        return storage.scheme(self.text)

    def require_local(self, error: type[Exception], message: str) -> Path:
        """The path on this host, for a writer or a library that only takes local files; `error(message)` for
        a location in a store."""
        if self.local_path is None:
            raise error(message)
        return self.local_path

    def check_reachable(self, what: str) -> None:
        """For a store, its bucket (or root) asked for once, before any work (`storage.check_reachable`:
        StoreUnreachable naming `what`, within seconds); nothing for a path on this host."""
        storage.check_reachable(self.text, what)

    def check_regular_file(
        self, named_in: str, *, error: type[Exception], advice: str, follow_links: bool = False
    ) -> None:
        """`core.regular.check_regular_file` of this location: `error` for a FIFO, a device, a folder, a link
        (unless `follow_links`) or an over-long name where a file should be; nothing when it is missing."""
        from core.regular import check_regular_file

        check_regular_file(self.text, named_in, error=error, follow_links=follow_links, advice=advice)

    @property
    def renames(self) -> bool:
        """Whether this filesystem renames in one step (a local disk), so that an output can be staged beside
        its folder and swapped in; a store renames nothing (a copy, then a delete)."""
        return self.local_path is not None

    @property
    def identity(self) -> str:
        """What tells whether two locations are one file, or one lies inside the other: a local path with its
        links resolved (a file reached through a link is where the link leads), a URI as written, without a
        trailing '/'."""
        local = self.local_path
        return os.path.realpath(local) if local is not None else self.text.rstrip("/")

    def arrow(self) -> tuple[pafs.FileSystem, str]:
        """The pyarrow filesystem and the path in it (Ray Train's and Ray Tune's storage, `pyarrow.fs` calls)."""
        return storage.resolve(self.text)

    def cached_copy(self, kind: str, key: Callable[[], str], check: Callable[[Path], Any]) -> Path:
        """A local folder holding this folder's files, to read: the folder itself when local; for a store, a
        copy in this user's cache (`core.transfer.cached_copy`: downloaded once per `key()`, `check` on every
        use)."""
        if self.local_path is not None:
            return self.local_path
        from core import transfer

        return transfer.cached_copy(self.text, kind, key(), check)

    # --- files -------------------------------------------------------------------------------------------
    def make_folder(self) -> None:
        """Create this folder and its parents where the filesystem has folders (a store's prefix needs none)."""
        if self.local_path is not None:
            self.local_path.mkdir(parents=True, exist_ok=True)

    def exists(self) -> bool:
        """Whether a file is here."""
        return storage.exists(self.text)

    def is_dir(self) -> bool:
        """Whether a folder (a prefix holding something, in a store) is here."""
        fs, path = self.arrow()
        return fs.get_file_info(path).type == pafs.FileType.Directory

    def size(self) -> int:
        return storage.size(self.text)

    def read_bytes(self) -> bytes:
        return storage.read_bytes(self.text)

    def read_json(self) -> Any:
        return storage.read_json(self.text)

    def write_bytes(self, data: bytes) -> None:
        storage.write_bytes(self.text, data)

    def replace_bytes(self, data: bytes) -> None:
        storage.replace_bytes(self.text, data)

    def write_json(self, value: Any, *, indent: int | None = 2) -> None:
        storage.write_json(self.text, value, indent=indent)

    def delete(self) -> None:
        storage.delete_file(self.text)

    def sha256(self) -> str:
        return storage.sha256(self.text)

    def verify_sha256(self, recorded: str, *, named_in: str, error: type[Exception], advice: str = "") -> None:
        """`error` when this file is missing or its SHA-256 is not `recorded` (`storage.verify_sha256`)."""
        storage.verify_sha256(self.text, recorded, named_in=named_in, error=error, advice=advice)

    def open_input(self):
        """The file opened for binary reading, buffered, by lines (`storage.open_input`)."""
        return storage.open_input(self.text)

    def open_parquet(self):
        """A `pyarrow.parquet.ParquetFile` reading this file by ranges (`storage.open_parquet`)."""
        return storage.open_parquet(self.text)

    # --- folders -----------------------------------------------------------------------------------------
    def entries(self) -> list[str]:
        return storage.entries(self.text)

    def files(self) -> list[str]:
        return storage.files(self.text)

    def subdirectories(self) -> list[str]:
        return storage.subdirectories(self.text)

    def glob(self, pattern: str = "") -> list[Location]:
        """The files here as an input names them, sorted by name. With `pattern` ('/'-separated components,
        each matched by one of `*`, `?`, `[...]`, or `**` for any number of folders): the files under this folder
        that it matches, locally as the shell's glob does (a wildcard never matches a leading '.'), in a store on
        its listing. Without: this file, or this folder's visible files (not those of its subfolders, nor names
        that start with '.'); FileNotFoundError ("no such file or directory", "no such file or prefix") when
        nothing is here. A local file comes as its real path (links followed: a link to a file is a file)."""
        local = self.local_path
        if local is None:
            return _store_matches(self, pattern)
        if pattern:
            found = [local / m for m in shell.glob(pattern, root_dir=local, recursive=True) if (local / m).is_file()]
        elif local.is_dir():
            found = [p for p in local.iterdir() if p.is_file() and not p.name.startswith(".")]
        elif local.is_file():
            found = [local]
        else:
            raise FileNotFoundError("no such file or directory")
        return [Location(str(p.resolve())) for p in sorted(found)]


def _store_matches(folder: Location, pattern: str) -> list[Location]:
    """`Location.glob` in a store, on one listing of `folder` (or one look at the file it names)."""
    if pattern:
        parts = pattern.split("/")
        return [folder.join(name) for name in folder.files() if _glob_match(name.split("/"), parts)]
    if folder.exists():
        return [folder]
    names = [name for name in folder.files() if "/" not in name and not name.startswith(".")]
    if not names and not folder.entries():
        raise FileNotFoundError("no such file or prefix")
    return [folder.join(name) for name in names]


def _glob_match(parts: list[str], pattern: list[str]) -> bool:
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return _glob_match(parts, pattern[1:]) or bool(parts) and _glob_match(parts[1:], pattern)
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _glob_match(parts[1:], pattern[1:])
