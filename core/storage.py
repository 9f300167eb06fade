"""Files by location: a local path, or a URI (s3://, gs://, hdfs://, file://) through pyarrow.fs; the functions
that `core.location.Location`'s methods call. A location without a scheme is a local path, resolved against the
working directory. The store's endpoint: `core.connection`; whole folders: `core.transfer`; what the product may
replace or clean: `core.ownership`; the commit of an output: `core.output`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import posixpath
import re
import uuid
from pathlib import Path
from typing import Any, TypeAlias
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from core import anchor, listing
from core.boundary import Located, check_name
from core.connection import ENDPOINT_ENV, s3_options
from core.errors import UserError

# What the functions here take: a location (`core.location.Location`, the value the product passes around), or
# the text or path a user gave, read as `Location.of` reads it.
Where: TypeAlias = str | Path | Located
SCHEMES = ("s3", "gs", "hdfs", "file")


class StorageError(UserError, ValueError):
    """A location that names no filesystem pyarrow can open."""


def is_uri(location: Where) -> bool:
    """Whether `location` names a filesystem by scheme (`s3://bucket/key`) rather than a local path."""
    return "://" in str(location)


def scheme(location: Where) -> str:
    """`s3`, `gs`, `hdfs`, `file`, or `local` for a path without a scheme."""
    return str(location).split("://", 1)[0].lower() if is_uri(location) else "local"


def check_location(location: Where, what: str) -> str:
    """`location` as given, once it is a local path or a URI with a supported scheme; StorageError naming
    `what` (the key or flag) otherwise. A path that merely looks like a URI (`s3:/bucket`, `s3:bucket`) is
    refused too: taken as local, it would write into a folder named `s3:` beside the user's files."""
    text = str(location)
    if is_uri(text):
        if scheme(text) not in SCHEMES:
            raise StorageError(
                f"{what}: {text}: unsupported scheme {scheme(text)}://; use a local path or "
                f"{', '.join(s + '://' for s in SCHEMES)}"
            )
        if scheme(text) == "file" and not text[len("file://") :].startswith("/"):
            raise StorageError(f"{what}: {text}: file:// needs an absolute path (file:///data/x)")
        if scheme(text) != "file" and not urlsplit(text).netloc:
            raise StorageError(f"{what}: {text}: no bucket (write {scheme(text)}://BUCKET/path)")
    elif re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", text) and not re.match(r"^[A-Za-z]:[\\/]", text):
        raise StorageError(
            f"{what}: {text} looks like a URI without '//' (write {text.split(':', 1)[0]}://...); "
            "a local path must not start with a scheme"
        )
    return text


def absolute(location: Where) -> str:
    """A URI as it is, a local path made absolute: the same location from any working directory."""
    return str(location) if is_uri(location) else os.path.abspath(str(location))


def join(location: Where, *parts: str) -> str:
    """`location/part/...`, keeping a URI's scheme and authority (StorageError for a URI without one). Each part
    is a relative name inside `location` (`boundary.check_name`: BoundaryError for `..`, an absolute path...),
    so a name read from a manifest never leads out of its folder."""
    for part in parts:
        check_name(part, f"a name under {location}")
    if is_uri(location):
        if str(location).rstrip("/").endswith(":"):  # `s3://`: stripped, it would become a local `s3:/...`
            raise StorageError(f"{location}: no bucket or host after the scheme")
        return "/".join([str(location).rstrip("/"), *parts])
    return os.path.join(str(location), *parts)


def resolve(location: Where) -> tuple[pafs.FileSystem, str]:
    """The filesystem holding `location` and the path within it. Raises StorageError."""
    if not is_uri(location):
        return pafs.LocalFileSystem(), os.path.abspath(str(location))
    text = check_location(location, "location")
    if scheme(text) == "s3":
        return _s3(tuple(sorted(s3_options().items()))), text[len("s3://") :].rstrip("/")
    try:
        return pafs.FileSystem.from_uri(text)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise StorageError(
            f"{location}: {exc}; give a local path or a URI with one of the schemes "
            f"{', '.join(s + '://' for s in SCHEMES)} (file:// needs an absolute path)"
        ) from exc


class StoreUnreachable(ConnectionError):
    """An object store that does not answer, or a bucket that does not exist: not the input's fault (exit 1)."""


def check_reachable(location: Where, what: str) -> None:
    """For a URI, ask its store for the bucket (or root) once, before any work: StoreUnreachable naming
    `what`, the store and the reason, within seconds. Local paths are not checked here."""
    if not is_uri(location):
        return
    fs, path = resolve(location)
    root = path.split("/", 1)[0] if scheme(location) in ("s3", "gs") else "/"
    try:
        info = fs.get_file_info(root)
    except OSError as exc:
        raise StoreUnreachable(
            f"{what}: {location}: the store does not answer ({_first_line(exc)}); check "
            f"{ENDPOINT_ENV} or the storage section, and the credentials"
        ) from None
    if info.type == pafs.FileType.NotFound:
        raise StoreUnreachable(
            f"{what}: {location}: bucket {root!r} does not exist at "
            f"{os.environ.get(ENDPOINT_ENV) or 'the default endpoint'}; create it first"
        )


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


@functools.lru_cache(maxsize=8)
def _s3(options: tuple[tuple[str, str], ...]) -> pafs.S3FileSystem:
    # One client per set of options: making one costs a few milliseconds and every read resolves.
    return pafs.S3FileSystem(**dict(options))


def exists(location: Where) -> bool:
    """Whether `location` is a file."""
    fs, path = resolve(location)
    return fs.get_file_info(path).type == pafs.FileType.File


def size(location: Where) -> int:
    """The file's size in bytes."""
    fs, path = resolve(location)
    return fs.get_file_info(path).size


def read_bytes(location: Where) -> bytes:
    """The whole file. Raises FileNotFoundError if it is missing."""
    fs, path = resolve(location)
    with fs.open_input_stream(path) as stream:
        return stream.read()


def open_input(location: Where):
    """The file opened for binary reading, buffered, seekable, by lines (`readline`, iteration): a local
    file as `open` gives it, a URI's through pyarrow (ranged reads). FileNotFoundError if it is missing."""
    if not is_uri(location):
        return open(str(location), "rb")
    fs, path = resolve(location)
    return io.BufferedReader(fs.open_input_file(path), buffer_size=1 << 20)


def write_bytes(location: Where, data: bytes) -> None:
    """Create or replace the file (its parent directories too, where the filesystem has any). Locally a new
    file renamed into place (`replace_bytes`): an existing inode is never opened for writing, so a snapshot
    that a user hard-linked (`cp -al`, `rsync --link-dest`) keeps its bytes, and nothing is written through
    a link."""
    fs, path = resolve(location)
    if fs.type_name in ("local", "hdfs"):
        replace_bytes(location, data)
        return
    fs.create_dir(posixpath.dirname(path), recursive=True)
    with fs.open_output_stream(path) as stream:
        stream.write(data)


def open_parquet(location: Where):
    """A `pyarrow.parquet.ParquetFile` reading `location` (local or URI) by ranges: its metadata, a row group."""
    import pyarrow.parquet as pq

    fs, path = resolve(location)
    return pq.ParquetFile(fs.open_input_file(path))


def json_bytes(value: Any, *, indent: int | None = 2) -> bytes:
    """`value` as every JSON file of the product holds it (manifests, records): UTF-8, indented, one newline last."""
    return (json.dumps(value, indent=indent, ensure_ascii=False) + "\n").encode("utf-8")


def write_json(location: Where, value: Any, *, indent: int | None = 2) -> None:
    """Replace the JSON file at `location` whole (`replace_bytes`)."""
    replace_bytes(location, json_bytes(value, indent=indent))


def replace_bytes(location: Where, data: bytes) -> None:
    """Create or replace the file at `location` whole: readers see the old file or the new one, never half of
    one, and a killed writer leaves no half file under its name. Beside it, a temporary file created for this
    write alone (locally with O_EXCL: never a file that is there) and renamed; on an object store, one PUT."""
    fs, path = resolve(location)
    if fs.type_name not in ("local", "hdfs"):
        fs.create_dir(posixpath.dirname(path), recursive=True)
        with fs.open_output_stream(path) as stream:  # one PUT: atomic
            stream.write(data)
        return
    held = anchor.holder_of(path) if fs.type_name == "local" else None
    if held is not None:  # an output folder being written into: through the folder as it was checked
        anchor.replace_under(held, path, data)
        return
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"  # `ownership._TMP`
    fs.create_dir(posixpath.dirname(path), recursive=True)
    created = False  # a file that already had the temporary name is never touched, not even removed
    try:
        with open(tmp, "xb") if fs.type_name == "local" else fs.open_output_stream(tmp) as stream:
            created = True
            stream.write(data)
        fs.move(tmp, path)  # a rename: the old file or the new one
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                fs.delete_file(tmp)
        raise


def read_json(location: Where) -> Any:
    """The JSON value of the file at `location`. FileNotFoundError if it is missing, ValueError if unreadable."""
    return json.loads(read_bytes(location))


def sha256(location: Where) -> str:
    """The file's SHA-256, hex."""
    digest = hashlib.sha256()
    fs, path = resolve(location)
    with fs.open_input_stream(path) as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_sha256(location: Where, recorded: str, *, named_in: str, error: type[Exception], advice: str = "") -> None:
    """Raise `error` when the file at `location` is missing or its SHA-256 is not `recorded` (as the manifest
    `named_in` records it); `advice` (e.g. "; run ...") ends the message."""
    try:
        actual = sha256(location)
    except FileNotFoundError:
        raise error(f"{location}: missing, named in {named_in}{advice}") from None
    if actual != recorded:
        raise error(
            f"{location}: sha256 {actual[:12]} differs from {recorded[:12]} in {named_in}: the file is "
            f"damaged or was replaced{advice}"
        )


def delete_file(location: Where) -> None:
    """Delete one file. Raises FileNotFoundError if it is missing."""
    fs, path = resolve(location)
    fs.delete_file(path)


# --- Listing (`core.listing`) -------------------------------------------------------------------------------
def subdirectories(location: Where) -> list[str]:
    """The names of the directories (prefixes) directly under `location`; [] if there is none."""
    return listing.subdirectories(*resolve(location))


def entries(location: Where) -> list[str]:
    """Every file and directory under `location`, as '/'-separated paths relative to it, sorted (parents
    before their children); [] when there is nothing there. Locally a link is listed, never followed."""
    return listing.entries(*resolve(location))


def files(location: Where) -> list[str]:
    """The files under `location` (not the directories, nor links), as in `entries`."""
    return listing.files(*resolve(location))
