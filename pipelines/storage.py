"""Files by location: a local path, or a URI (s3://, gs://, hdfs://, file://) through pyarrow.fs.

Every read and write of a dataset goes through these helpers, so the job and
the commit protocol (`pipelines.staging`) run unchanged on any filesystem that
`pyarrow.fs.FileSystem.from_uri` knows. A location without a scheme is a local
path, resolved against the working directory.
"""
from __future__ import annotations

import hashlib
import os
import posixpath
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

Location = str | Path
SCHEMES = ("s3", "gs", "hdfs", "file")


class StorageError(ValueError):
    """A location that names no filesystem pyarrow can open."""


def is_uri(location: Location) -> bool:
    """Whether `location` names a filesystem by scheme (`s3://bucket/key`) rather than a local path."""
    return "://" in str(location)


def join(location: Location, *parts: str) -> str:
    """`location/part/...`, keeping a URI's scheme and authority."""
    if is_uri(location):
        return "/".join([str(location).rstrip("/"), *parts])
    return os.path.join(location, *parts)


def resolve(location: Location) -> tuple[pafs.FileSystem, str]:
    """The filesystem holding `location` and the path within it. Raises StorageError."""
    if not is_uri(location):
        return pafs.LocalFileSystem(), os.path.abspath(location)
    try:
        return pafs.FileSystem.from_uri(str(location))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise StorageError(
            f"{location}: {exc}; give a local path or a URI with one of the schemes "
            f"{', '.join(s + '://' for s in SCHEMES)} (file:// needs an absolute path)"
        ) from exc


def exists(location: Location) -> bool:
    """Whether `location` is a file."""
    fs, path = resolve(location)
    return fs.get_file_info(path).type == pafs.FileType.File


def size(location: Location) -> int:
    """The file's size in bytes."""
    fs, path = resolve(location)
    return fs.get_file_info(path).size


def read_bytes(location: Location) -> bytes:
    """The whole file. Raises FileNotFoundError if it is missing."""
    fs, path = resolve(location)
    with fs.open_input_stream(path) as stream:
        return stream.read()


def write_bytes(location: Location, data: bytes) -> None:
    """Create or replace the file (its parent directories too, where the filesystem has any)."""
    fs, path = resolve(location)
    fs.create_dir(posixpath.dirname(path), recursive=True)
    with fs.open_output_stream(path) as stream:
        stream.write(data)


def sha256(location: Location) -> str:
    """The file's SHA-256, hex."""
    digest = hashlib.sha256()
    fs, path = resolve(location)
    with fs.open_input_stream(path) as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def delete_file(location: Location) -> None:
    """Delete one file. Raises FileNotFoundError if it is missing."""
    fs, path = resolve(location)
    fs.delete_file(path)


def delete_dir(location: Location) -> None:
    """Delete a directory (a prefix, on object stores) and everything under it; nothing if absent."""
    fs, path = resolve(location)
    if fs.get_file_info(path).type == pafs.FileType.Directory:
        fs.delete_dir(path)


def subdirectories(location: Location) -> list[str]:
    """The names of the directories (prefixes) directly under `location`; [] if there is none."""
    fs, path = resolve(location)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        return []
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=False))
    return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)
