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
is dropped; empty lines (and null Parquet values) are sentences too. Every input
is a regular file (a FIFO, a device or a directory is refused by name).

A sentence longer than `max_chars` characters (`MAX_CHARS`: serve.max_sentence_chars, the most the model is
given to read) is cut to its first `max_chars`, and counted (`InputFile.cut`, the log): the row stays its line.
A line is read a bounded piece at a time (`read_line`), so a line of any length costs the memory of
`max_chars` characters, and the model never gets the millions of tokens that took minutes (deaf to Ctrl+C) and
gigabytes to embed.
"""

from __future__ import annotations

import codecs
import hashlib
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final, NamedTuple

from core import storage
from core.boundary import check_regular_file
from core.errors import UserError
from core.location import Location
from orchestration.config.stages import ServeConfig

log = logging.getLogger(__name__)
BOM = b"\xef\xbb\xbf"
# The most characters of one sentence the model is given (its schema's default; `embed` reads the config's).
MAX_CHARS: Final[int] = ServeConfig.model_fields["max_sentence_chars"].default


_REGULAR = "an input is read by byte ranges: give a regular file"


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
    cut: int = 0  # of them longer than the limit, cut to it (`max_chars`)


@dataclass(frozen=True)
class BlockSpec:
    index: int  # the block's number: part-{index:05d}
    path: str
    kind: str
    first: int  # 0-based line (row) of the block's first sentence in its file
    rows: int
    offset: int = 0  # byte offset of the first line (text files)
    max_chars: int = MAX_CHARS  # each sentence cut to this many characters


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
    if wildcard < 0 and location.local_path is not None and not os.path.isdir(location.local_path):
        # a FIFO, a device or an over-long name, named as one (a glob and a folder's listing keep regular files)
        check_regular_file(location.local_path, what, error=CorpusError, follow_links=True, advice=_REGULAR)
    if wildcard < 0 or location.is_dir():
        try:
            return location.glob()
        except FileNotFoundError as exc:
            raise CorpusError(f"{spec}: {exc}") from None
    cut = spec.rfind("/", 0, wildcard)
    base, pattern = (spec[:cut] or "/", spec[cut + 1 :]) if cut >= 0 else (".", spec)
    return Location.of(base, what).glob(pattern)


def plan_blocks(
    paths: Iterable[str], *, column: str, block_rows: int, max_chars: int = MAX_CHARS
) -> tuple[list[InputFile], list[BlockSpec]]:
    """Scan every input (`*.parquet` as Parquet, anything else as text) and cut it into blocks of
    `block_rows` sentences, each sentence cut to `max_chars` characters (counted: `InputFile.cut`);
    CorpusError on bad UTF-8, a missing or non-text column."""
    if block_rows < 1:
        raise CorpusError("--block-rows must be at least 1")
    files: list[InputFile] = []
    blocks: list[BlockSpec] = []
    for path in paths:
        parquet = str(path).endswith(".parquet")
        info, offsets = _scan_parquet(path, column, max_chars) if parquet else _scan_text(path, block_rows, max_chars)
        files.append(info)
        for n, first in enumerate(range(0, info.rows, block_rows)):
            rows, offset = min(block_rows, info.rows - first), offsets[n] if info.kind == "text" else 0
            blocks.append(BlockSpec(len(blocks), info.path, info.kind, first, rows, offset, max_chars))
    return files, blocks


def _scan_text(path: str, block_rows: int, max_chars: int) -> tuple[InputFile, list[int]]:
    digest, offsets, lines, empty, cut, position = hashlib.sha256(), [], 0, 0, 0, 0
    with storage.open_input(path) as handle:
        while line := read_line(handle, path, lines + 1, max_chars=max_chars, first=position == 0, digest=digest):
            if lines % block_rows == 0:
                offsets.append(position)
            lines += 1
            empty += not line.text
            cut += line.cut
            position += line.size
    return InputFile(str(path), "text", position, digest.hexdigest(), lines, empty, cut), offsets


class Line(NamedTuple):
    text: str  # its first `max_chars` characters, without its line end (nor a file's opening BOM)
    size: int  # its bytes, its line end included
    cut: bool  # whether it held more than `max_chars` characters


def read_line(
    handle: BinaryIO,
    where: Path | str,
    number: int,
    *,
    max_chars: int = MAX_CHARS,
    first: bool = False,
    digest: Any = None,
) -> Line | None:
    """The next line of `handle` (None at its end; `first`: the file's first, its BOM dropped), read a bounded
    piece at a time whatever its length: it holds about `max_chars` characters, the rest of a longer line is
    read only to check it and hash it into `digest` (a hashlib object, fed every byte). CorpusError naming
    `where`:`number` when any of the line is not UTF-8."""
    piece_bytes = 4 * max_chars + 2  # max_chars characters of UTF-8 and a CRLF: a line within the limit is one piece
    decoder = codecs.getincrementaldecoder("utf-8")()
    kept: list[str] = []
    held = size = decoded = 0
    dropped = False
    while True:
        piece = handle.readline(piece_bytes)
        if digest is not None:
            digest.update(piece)
        raw = piece.removeprefix(BOM) if first and size == 0 else piece
        size += len(piece)
        ended = piece.endswith(b"\n") or len(piece) < piece_bytes  # readline stops short at a line end or EOF
        pending = len(decoder.getstate()[0])  # bytes of a character the last piece began
        try:
            text = decoder.decode(raw, final=ended)
        except UnicodeDecodeError as exc:
            raise CorpusError(
                f"{where}:{number}: not valid UTF-8 (byte {decoded - pending + exc.start + 1} of the line: "
                f"{exc.object[exc.start : exc.start + 4]!r}); convert the file to UTF-8 (e.g. iconv)"
            ) from None
        decoded += len(raw)
        if held <= max_chars + 2:  # the limit and a line end; beyond, checked and dropped
            kept.append(text)
            held += len(text)
        else:
            dropped = dropped or bool(text)
        if ended:
            break
    if not size:
        return None
    line = "".join(kept) if dropped else "".join(kept).rstrip("\r\n")
    return Line(line[:max_chars], size, dropped or len(line) > max_chars)


def read_lines(handle: BinaryIO, name: str, *, max_chars: int = MAX_CHARS) -> Iterator[str]:
    """The lines of an open binary stream as text (`read_line`: each cut to `max_chars` characters, the cut
    ones counted in a warning once the stream ends), for small in-process inputs."""
    number = cut = 0
    while line := read_line(handle, name, number + 1, max_chars=max_chars, first=number == 0):
        number += 1
        cut += line.cut
        yield line.text
    warn_cut(name, cut, number, max_chars)


def warn_cut(where: str, cut: int, total: int, max_chars: int) -> None:
    """The log line that counts the sentences cut to `max_chars` characters (nothing when none was)."""
    if cut:
        log.warning(
            "%s: %d of %d sentences are longer than %d characters, the most the model is given "
            "(serve.max_sentence_chars): each is embedded from its first %d",
            where,
            cut,
            total,
            max_chars,
            max_chars,
        )


def read_column(path: Path | str, column: str, *, max_chars: int = MAX_CHARS) -> Iterator[str]:
    """The texts of a Parquet file's `column` (a local path or a URI), a row group at a time (null values
    as empty sentences), each cut to `max_chars` characters (the cut ones counted in a warning at the end)."""
    parquet = storage.open_parquet(path)
    rows = cut = 0
    for group in range(parquet.num_row_groups):
        values = parquet.read_row_group(group, columns=[column])[column].to_pylist()
        rows += len(values)
        cut += sum(1 for v in values if v is not None and len(v) > max_chars)
        yield from ("" if v is None else v[:max_chars] for v in values)
    warn_cut(str(path), cut, rows, max_chars)


def _scan_parquet(path: str, column: str, max_chars: int) -> tuple[InputFile, list[int]]:
    import pyarrow as pa
    import pyarrow.compute as pc

    parquet = storage.open_parquet(path)
    schema = parquet.schema_arrow
    if column not in schema.names:
        raise CorpusError(f"{path}: no column {column!r} (it has {', '.join(schema.names)}); pass --column NAME")
    if not (pa.types.is_string(schema.field(column).type) or pa.types.is_large_string(schema.field(column).type)):
        raise CorpusError(f"{path}: column {column!r} is {schema.field(column).type}, not text; pass --column NAME")
    empty, seen, cut = 0, 0, 0
    for batch in parquet.iter_batches(columns=[column], batch_size=65536):
        values = batch.column(0)
        try:
            values.validate(full=True)
        except pa.ArrowInvalid:
            raise CorpusError(f"{path}: row {seen + _first_invalid(values) + 1}: not valid UTF-8") from None
        empty += values.null_count + sum(1 for v in values.to_pylist() if v == "")
        cut += pc.sum(pc.greater(pc.utf8_length(values), max_chars)).as_py() or 0
        seen += len(values)
    return InputFile(str(path), "parquet", storage.size(path), storage.sha256(path), seen, empty, cut), []


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
    """The sentences of one block (null Parquet values as empty sentences), each cut to `block.max_chars`
    characters, read by byte offset (a line a bounded piece at a time: `read_line`) or row groups from its
    file (a local path or a URI)."""
    if block.kind == "text":
        with storage.open_input(block.path) as handle:
            handle.seek(block.offset)
            lines = []
            for i in range(block.rows):
                first = block.offset == 0 and i == 0
                line = read_line(handle, block.path, block.first + i + 1, max_chars=block.max_chars, first=first)
                if line is None:  # the file is shorter than when it was planned
                    raise CorpusError(f"{block.path}: ends before line {block.first + i + 1}: it changed; run again")
                lines.append(line.text)
            return lines
    parquet = storage.open_parquet(block.path)
    groups, start = [], 0
    for g in range(parquet.num_row_groups):
        size = parquet.metadata.row_group(g).num_rows
        if start < block.first + block.rows and start + size > block.first:
            groups.append((g, start))
        start += size
    table = parquet.read_row_groups([g for g, _ in groups], columns=[column])
    values = table[column].slice(block.first - groups[0][1], block.rows).to_pylist()
    return ["" if v is None else v[: block.max_chars] for v in values]
