"""Text read a line at a time in bounded memory, for the one input reader (`embedding.inputs`: embed's blocks, a
text file read whole by mine, test sets and the in-process embed).

A line is read a bounded piece at a time (`read_line`), so a line of any length costs the memory of
`max_chars` characters (`MAX_CHARS`: serve.max_sentence_chars, the most the model is given to read); a longer
one is cut to its first `max_chars` and counted (`warn_cut`), and its tail is still read, checked as UTF-8 and
hashed. A line ends with LF or CRLF; a byte-order mark opening a file is dropped.
"""

from __future__ import annotations

import codecs
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final, NamedTuple

from core.errors import UserError
from orchestration.config.stages import ServeConfig

log = logging.getLogger(__name__)
BOM = b"\xef\xbb\xbf"
# The most characters of one sentence the model is given (its schema's default; `embed` reads the config's).
MAX_CHARS: Final[int] = ServeConfig.model_fields["max_sentence_chars"].default


class CorpusError(UserError, ValueError):
    """Input that cannot be embedded as given; the message names the file (and line) and what to do."""


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
