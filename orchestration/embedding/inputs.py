"""The one input reader (`interlingua embed`, `mine`, test sets): text files (one sentence per line) and Parquet
files (a text column).

    paths = resolve_inputs(["corpus/", "more/*.txt", "news.parquet"])
    files, blocks = plan_blocks(paths, column="text", block_rows=20000)
    sentences = read_block(blocks[0], column="text")            # one block, nothing more
    lines = read_lines(open("news.txt", "rb"), "news.txt")      # a whole file (mine, test sets)

Every name may be a local path or a URI (`s3://bucket/corpus/*.txt`), read through `core.location.Location`
(ranged reads): a URI's directory is its prefix, its glob is matched on the store's listing.

`plan_blocks` reads every input once, streaming: it checks UTF-8 (an error
names the file and line), hashes the bytes, counts lines and empty lines, and
notes where each block of `block_rows` lines starts, so a block is read on its
own (by byte offset, or by Parquet row groups) and the same inputs always give
the same blocks. A line ends with LF or CRLF; a byte-order mark opening a file
is dropped; empty lines (and null Parquet values) are sentences too. Every input
is a regular file (a FIFO, a device or a directory is refused by name).

Each block carries the sha256 of the input it covers as planned (`BlockSpec.sha256`: the bytes of its lines, or
its Parquet values, `_value_bytes`); its reader hashes what it reads, and refuses a block whose input changed
after it was planned (`read_block_text`: CorpusError naming the file and the block, "run again"), so that no
block's vectors are of other lines than the plan's.

A sentence longer than `max_chars` characters (`MAX_CHARS`: serve.max_sentence_chars, the most the model is
given to read) is cut to its first `max_chars`, and counted (`InputFile.cut`, the log): the row stays its line.
Lines are read in bounded memory (`embedding.lines`), so the model never gets the millions of tokens that took
minutes (deaf to Ctrl+C) and gigabytes to embed.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from core.location import Location
from orchestration.embedding.lines import MAX_CHARS, CorpusError, read_line, warn_cut
from orchestration.embedding.lines import Line as Line  # the line reader's, which its users import from here
from orchestration.embedding.lines import read_lines as read_lines

_REGULAR = "an input is read by byte ranges: give a regular file"


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
    sha256: str = ""  # of the input it covers, as planned: its lines' bytes, or its Parquet values (`_value_bytes`)


def log_plan(
    logger: logging.Logger, files: list[InputFile], blocks: list[BlockSpec], block_rows: int, done: int, max_chars: int
) -> None:
    """The one line a corpus job (`embed`, `translate -o DIR`) says of its plan: sentences, empty and cut ones,
    files, blocks, and how many are complete already."""
    logger.info(
        "%d sentences (%d empty, %d cut to %d characters) in %d files -> %d blocks of %d, %d complete already",
        sum(f.rows for f in files),
        sum(f.empty for f in files),
        sum(f.cut for f in files),
        max_chars,
        len(files),
        len(blocks),
        block_rows,
        done,
    )


def resolve_inputs(specs: Sequence[str], *, what: str = "-i") -> list[str]:
    """Files named directly, by glob (`*`, `?`, `[`, `**`) or as a directory (its visible files), in
    the order given, each once; directories and glob matches sorted by name (`core.location.Location.glob`).
    Local files come back as absolute paths, a URI's as URIs. CorpusError when a name matches nothing;
    StorageError (naming `what`) for a URI of an unsupported scheme."""
    found: list[str] = []
    for spec in specs:
        matches = [str(m) for m in _matches(spec, what)]  # `Location.of` first: StorageError naming `what`
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
    if wildcard < 0 and location.on_this_host and not os.path.isdir(location.text):
        # a FIFO, a device or an over-long name, named as one (a glob and a folder's listing keep regular files)
        location.check_regular_file(what, error=CorpusError, follow_links=True, advice=_REGULAR)
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
        if str(path).endswith(".parquet"):
            info, offsets, hashes = _scan_parquet(path, column, block_rows, max_chars)
        else:
            info, offsets, hashes = _scan_text(path, block_rows, max_chars)
        files.append(info)
        for n, first in enumerate(range(0, info.rows, block_rows)):
            rows, offset = min(block_rows, info.rows - first), offsets[n] if info.kind == "text" else 0
            blocks.append(BlockSpec(len(blocks), info.path, info.kind, first, rows, offset, max_chars, hashes[n]))
    return files, blocks


class _Digests:
    """A hashlib-like sink (`read_line`'s `digest`) feeding every byte to the whole file's digest and to the
    digest of the block being read."""

    def __init__(self) -> None:
        self.file, self.blocks = hashlib.sha256(), [hashlib.sha256()]

    def update(self, data: bytes) -> None:
        self.file.update(data)
        self.blocks[-1].update(data)


def _scan_text(path: str, block_rows: int, max_chars: int) -> tuple[InputFile, list[int], list[str]]:
    """The file's InputFile, the byte offset of each block's first line and the sha256 of each block's bytes."""
    digests, offsets, lines, empty, cut, position = _Digests(), [], 0, 0, 0, 0
    with Location.of(path).open_input() as handle:
        while line := read_line(handle, path, lines + 1, max_chars=max_chars, first=position == 0, digest=digests):
            if lines % block_rows == 0:
                offsets.append(position)
            lines += 1
            empty += not line.text
            cut += line.cut
            position += line.size
            if lines % block_rows == 0:
                digests.blocks.append(hashlib.sha256())  # the next block's, from its first byte
    hashes = [d.hexdigest() for d in digests.blocks[: len(offsets)]]
    return InputFile(str(path), "text", position, digests.file.hexdigest(), lines, empty, cut), offsets, hashes


def read_column(path: Path | str, column: str, *, max_chars: int = MAX_CHARS) -> Iterator[str]:
    """The texts of a Parquet file's `column` (a local path or a URI), a row group at a time (null values
    as empty sentences), each cut to `max_chars` characters (the cut ones counted in a warning at the end)."""
    parquet = Location.of(path).open_parquet()
    rows = cut = 0
    for group in range(parquet.num_row_groups):
        values = parquet.read_row_group(group, columns=[column])[column].to_pylist()
        rows += len(values)
        cut += sum(1 for v in values if v is not None and len(v) > max_chars)
        yield from ("" if v is None else v[:max_chars] for v in values)
    warn_cut(str(path), cut, rows, max_chars)


def _scan_parquet(path: str, column: str, block_rows: int, max_chars: int) -> tuple[InputFile, list, list[str]]:
    """The file's InputFile, no offsets, and the sha256 of each block's values (`_value_bytes`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    source = Location.of(path)
    parquet = source.open_parquet()
    schema = parquet.schema_arrow
    if column not in schema.names:
        raise CorpusError(f"{path}: no column {column!r} (it has {', '.join(schema.names)}); pass --column NAME")
    if not (pa.types.is_string(schema.field(column).type) or pa.types.is_large_string(schema.field(column).type)):
        raise CorpusError(f"{path}: column {column!r} is {schema.field(column).type}, not text; pass --column NAME")
    empty, seen, cut, digests = 0, 0, 0, []
    for batch in parquet.iter_batches(columns=[column], batch_size=65536):
        values = batch.column(0)
        try:
            values.validate(full=True)
        except pa.ArrowInvalid:
            raise CorpusError(f"{path}: row {seen + _first_invalid(values) + 1}: not valid UTF-8") from None
        listed = values.to_pylist()
        empty += values.null_count + sum(1 for v in listed if v == "")
        cut += pc.sum(pc.greater(pc.utf8_length(values), max_chars)).as_py() or 0
        for row, value in enumerate(listed, seen):
            if row % block_rows == 0:
                digests.append(hashlib.sha256())
            digests[-1].update(_value_bytes(value))
        seen += len(values)
    info = InputFile(str(path), "parquet", source.size(), source.sha256(), seen, empty, cut)
    return info, [], [d.hexdigest() for d in digests]


def _value_bytes(value: str | None) -> bytes:
    """One Parquet value as its block's sha256 takes it: null, or its UTF-8 bytes after their length (so that
    no two sequences of values hash alike)."""
    if value is None:
        return b"\x00"
    raw = value.encode("utf-8")
    return b"\x01" + len(raw).to_bytes(8, "little") + raw


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


class BlockText(NamedTuple):
    sentences: list[str]  # each cut to the block's `max_chars` characters (null Parquet values: empty)
    sha256: str  # of the input read: the bytes of its lines, or its Parquet values (`_value_bytes`)


def read_block(block: BlockSpec, *, column: str) -> list[str]:
    """The sentences of one block, as planned (`read_block_text`)."""
    return read_block_text(block, column=column).sentences


def read_block_text(block: BlockSpec, *, column: str) -> BlockText:
    """The sentences of one block (null Parquet values as empty sentences), each cut to `block.max_chars`
    characters, read by byte offset (a line a bounded piece at a time: `read_line`) or row groups from its
    file (a local path or a URI), and the sha256 of what was read. CorpusError naming the file and the block
    when that is not the sha256 it was planned with (`BlockSpec.sha256`): the input changed since."""
    assert block.sha256, f"{block}: a block is read as planned (`plan_blocks`)"
    digest = hashlib.sha256()
    what = "lines" if block.kind == "text" else "rows"
    changed = CorpusError(
        f"{block.path}: {what} {block.first + 1}-{block.first + block.rows} (block part-{block.index:05d}) "
        "changed after it was planned; run again"
    )
    sentences = _text_lines(block, digest) if block.kind == "text" else _parquet_values(block, column, digest)
    if len(sentences) != block.rows or digest.hexdigest() != block.sha256:
        raise changed
    return BlockText(sentences, digest.hexdigest())


def _text_lines(block: BlockSpec, digest: Any) -> list[str]:
    """A text block's lines, every byte read fed to `digest`."""
    with Location.of(block.path).open_input() as handle:
        handle.seek(block.offset)
        lines = []
        for i in range(block.rows):
            first = block.offset == 0 and i == 0
            number = block.first + i + 1
            line = read_line(handle, block.path, number, max_chars=block.max_chars, first=first, digest=digest)
            if line is None:  # the file is shorter than when it was planned
                raise CorpusError(f"{block.path}: ends before line {number}: it changed; run again")
            lines.append(line.text)
        return lines


def _parquet_values(block: BlockSpec, column: str, digest: Any) -> list[str]:
    """A Parquet block's values, read by row groups, each fed to `digest` (`_value_bytes`)."""
    parquet = Location.of(block.path).open_parquet()
    groups, start = [], 0
    for g in range(parquet.num_row_groups):
        size = parquet.metadata.row_group(g).num_rows
        if start < block.first + block.rows and start + size > block.first:
            groups.append((g, start))
        start += size
    if not groups:
        return []
    table = parquet.read_row_groups([g for g, _ in groups], columns=[column])
    values = table[column].slice(block.first - groups[0][1], block.rows).to_pylist()
    for value in values:
        digest.update(_value_bytes(value))
    return ["" if v is None else v[: block.max_chars] for v in values]
