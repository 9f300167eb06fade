"""What a source plan hands the Beam job: `ReadTask`s (a chunk of one source each), and the markers a
reader yields for a record that is not a tuple."""

from __future__ import annotations

from dataclasses import dataclass, field

MALFORMED = "malformed"  # a record that cannot be parsed
BELOW_MIN_SCORE = "below_min_score"  # a mined pair under its source's min_score


@dataclass(frozen=True)
class ReadTask:
    source: str  # source name: the tuple keys' prefix
    kind: str
    languages: tuple[str, ...]
    start_line: int  # 1-based line number of the chunk's first record
    n_lines: int
    paths: dict[str, str] = field(default_factory=dict)  # lang -> file (text); "" -> file (table)
    offsets: dict[str, int] = field(default_factory=dict)  # same keys -> byte offset
    columns: dict[str, int] = field(default_factory=dict)  # lang -> TSV column index
    fields: dict[str, str] = field(default_factory=dict)  # lang -> JSONL field
    versions: dict[str, str] = field(default_factory=dict)  # lang -> Bible version (bible)
    book: int = 0
    score: float = 0.0  # the minimum margin score (mined)
    index: int = 0  # the file's position among its source's files (tmx)
    lang_map: dict[str, str] = field(default_factory=dict)  # an xml:lang -> its language (tmx)
    source_language: str = ""  # the msgid's language (gettext)
    catalog: str = ""  # the catalog's name, its files' stem (gettext)


@dataclass
class SourcePlan:
    tasks: list[ReadTask]
    fingerprints: list[dict]
    records: int  # input tuples (records) in all sources
