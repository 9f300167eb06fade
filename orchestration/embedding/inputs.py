"""The one input reader (`interlingua embed`, `mine`, test sets): text files (one sentence per line) and Parquet
files (a text column).

    paths = resolve_inputs(["corpus/", "more/*.txt", "news.parquet"])
    files, blocks = plan_blocks(paths, column="text", block_rows=20000)
    sentences = read_block(blocks[0], column="text")            # one block, nothing more
    lines = read_lines(open("news.txt", "rb"), "news.txt")      # a whole file (mine, test sets)

Every name may be a local path or a URI (`s3://bucket/corpus/*.txt`), read through `core.storage`
(ranged reads): a URI's directory is its prefix, its glob is matched on the store's listing.

`plan_blocks` reads every input once, streaming: it checks UTF-8 (an error
names the file and line), hashes the bytes, counts lines and empty lines, and
notes where each block of `block_rows` lines starts, so a block is read on its
own (by byte offset, or by Parquet row groups) and the same inputs always give
the same blocks. A line ends with LF or CRLF; a byte-order mark opening a file
is dropped; empty lines (and null Parquet values) are sentences too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from core import storage
from core.errors import UserError
from core.location import Location

BOM = b"\xef\xbb\xbf"


class CorpusError(UserError, ValueError):
    """Input that cannot be embedded as given; the message names the file (and line) and what to do."""


@dataclass(frozen=True)
class InputFile:
    path: str
    kind: str  # "text" or "parquet"
    bytes: int
    sha256: str
    rows: int  # sentences (lines, or Parquet rows)
    empty: int  # of them empty (or null)


@dataclass(frozen=True)
class BlockSpec:
    index: int  # the block's number: part-{index:05d}
    path: str
    kind: str
    first: int  # 0-based line (row) of the block's first sentence in its file
    rows: int
    offset: int = 0  # byte offset of the first line (text files)


def resolve_inputs(specs: Sequence[str], *, what: str = "-i") -> list[str]:
    """Files named directly, by glob (`*`, `?`, `[`, `**`) or as a directory (its visible files), in
    the order given, each once; directories and glob matches sorted by name (`core.location.Location.glob`).
    Local files come back as absolute paths, a URI's as URIs. CorpusError when a name matches nothing;
    StorageError (naming `what`) for a URI of an unsupported scheme."""
    found: list[str] = []
    for spec in specs:
        storage.check_location(spec, what)
        matches = [str(m) for m in _matches(spec, what)]
        if not matches:
            raise CorpusError(f"{spec}: matches no file")
        found += [m for m in matches if m not in found]
    return found


def _matches(spec: str, what: str) -> list[Location]:
    """The files `spec` names: the file or folder it names (a folder's name may hold a '['), or its glob's
    matches under the folder above its first wildcard. CorpusError when there is nothing at a name without a
    wildcard."""
    location = Location.of(spec, what)
    wildcard = min((spec.index(c) for c in "*?[" if c in spec), default=-1)
    if wildcard < 0 or location.is_dir():
        try:
            return location.glob()
        except FileNotFoundError as exc:
            raise CorpusError(f"{spec}: {exc}") from None
    cut = spec.rfind("/", 0, wildcard)
    base, pattern = (spec[:cut] or "/", spec[cut + 1 :]) if cut >= 0 else (".", spec)
    return Location.of(base, what).glob(pattern)


def plan_blocks(paths: Iterable[str], *, column: str, block_rows: int) -> tuple[list[InputFile], list[BlockSpec]]:
    """Scan every input (`*.parquet` as Parquet, anything else as text) and cut it into blocks of
    `block_rows` sentences; CorpusError on bad UTF-8, a missing or non-text column."""
    if block_rows < 1:
        raise CorpusError("--block-rows must be at least 1")
    files: list[InputFile] = []
    blocks: list[BlockSpec] = []
    for path in paths:
        scan = _scan_parquet(path, column) if str(path).endswith(".parquet") else _scan_text(path, block_rows)
        info, offsets = scan
        files.append(info)
        for n, first in enumerate(range(0, info.rows, block_rows)):
            blocks.append(
                BlockSpec(
                    len(blocks),
                    info.path,
                    info.kind,
                    first,
                    min(block_rows, info.rows - first),
                    offsets[n] if info.kind == "text" else 0,
                )
            )
    return files, blocks


def _scan_text(path: str, block_rows: int) -> tuple[InputFile, list[int]]:
    digest, offsets, lines, empty, position = hashlib.sha256(), [], 0, 0, 0
    with storage.open_input(path) as handle:
        for raw in handle:
            if lines % block_rows == 0:
                offsets.append(position)
            digest.update(raw)
            lines += 1
            empty += not decode_line(raw, path, lines, first=position == 0)
            position += len(raw)
    return InputFile(str(path), "text", position, digest.hexdigest(), lines, empty), offsets


def decode_line(raw: bytes, path: Path | str, number: int, *, first: bool = False) -> str:
    """One line's text without its line end (and a file's opening BOM); CorpusError naming the file
    and 1-based line when it is not UTF-8."""
    if first:
        raw = raw.removeprefix(BOM)
    try:
        return raw.rstrip(b"\r\n").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorpusError(
            f"{path}:{number}: not valid UTF-8 (byte {exc.start + 1} of the line: "
            f"{raw[exc.start : exc.start + 4]!r}); convert the file to UTF-8 (e.g. iconv)"
        ) from None


def read_lines(handle: BinaryIO, name: str) -> Iterator[str]:
    """The lines of an open binary stream as text (`decode_line`), for small in-process inputs."""
    for number, raw in enumerate(handle, 1):
        yield decode_line(raw, name, number, first=number == 1)


def read_column(path: Path | str, column: str) -> Iterator[str]:
    """The texts of a Parquet file's `column` (a local path or a URI), a row group at a time (null values
    as empty sentences)."""
    parquet = storage.open_parquet(path)
    for group in range(parquet.num_row_groups):
        values = parquet.read_row_group(group, columns=[column])[column].to_pylist()
        yield from ("" if v is None else v for v in values)


def _scan_parquet(path: str, column: str) -> tuple[InputFile, list[int]]:
    import pyarrow as pa

    parquet = storage.open_parquet(path)
    schema = parquet.schema_arrow
    if column not in schema.names:
        raise CorpusError(f"{path}: no column {column!r} (it has {', '.join(schema.names)}); pass --column NAME")
    if not (pa.types.is_string(schema.field(column).type) or pa.types.is_large_string(schema.field(column).type)):
        raise CorpusError(f"{path}: column {column!r} is {schema.field(column).type}, not text; pass --column NAME")
    empty, seen = 0, 0
    for batch in parquet.iter_batches(columns=[column], batch_size=65536):
        values = batch.column(0)
        try:
            values.validate(full=True)
        except pa.ArrowInvalid:
            raise CorpusError(f"{path}: row {seen + _first_invalid(values) + 1}: not valid UTF-8") from None
        empty += values.null_count + sum(1 for v in values.to_pylist() if v == "")
        seen += len(values)
    return InputFile(str(path), "parquet", storage.size(path), storage.sha256(path), seen, empty), []


def _first_invalid(values) -> int:
    import pyarrow as pa

    raw = values.cast(pa.binary()).to_pylist()
    return next(i for i, v in enumerate(raw) if v is not None and not _is_utf8(v))


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def read_block(block: BlockSpec, *, column: str) -> list[str]:
    """The sentences of one block (null Parquet values as empty sentences), read by byte offset or row
    groups from its file (a local path or a URI)."""
    if block.kind == "text":
        with storage.open_input(block.path) as handle:
            handle.seek(block.offset)
            return [
                decode_line(handle.readline(), block.path, block.first + i + 1, first=block.offset == 0 and i == 0)
                for i in range(block.rows)
            ]
    parquet = storage.open_parquet(block.path)
    groups, start = [], 0
    for g in range(parquet.num_row_groups):
        size = parquet.metadata.row_group(g).num_rows
        if start < block.first + block.rows and start + size > block.first:
            groups.append((g, start))
        start += size
    table = parquet.read_row_groups([g for g, _ in groups], columns=[column])
    values = table[column].slice(block.first - groups[0][1], block.rows).to_pylist()
    return ["" if v is None else v for v in values]
