"""The file sources: line-aligned text files, a TSV or JSONL table, a mined pair file (`interlingua mine`'s
Parquet). Each is opened once on the driver (hashed, its chunks' byte offsets noted) and read by chunk on
the workers: `read_lines_task`, `read_mined`."""

from __future__ import annotations

import csv
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

from core import mined
from core.location import Location
from pipelines.errors import SourceError
from pipelines.read_task import BELOW_MIN_SCORE, MALFORMED, ReadTask, SourcePlan
from pipelines.source_config import MinedSource, TableSource, TextSource


@dataclass
class _Scan:
    lines: int
    offsets: list[int]
    sha256: str
    size: int


def scan_file(path: str, chunk_lines: int, skip_header: bool = False) -> _Scan:
    """Count lines, hash the bytes, and note where every chunk of lines starts."""
    try:
        handle = Location.of(path).open_input()
    except FileNotFoundError:
        raise SourceError(f"{path}: file not found") from None
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror or exc}") from None
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


def plan_text(source: TextSource, name: str, chunk_lines: int) -> SourcePlan:
    paths = {lang: source.path.format(lang=lang) for lang in source.languages}
    scans = {lang: scan_file(path, chunk_lines) for lang, path in paths.items()}
    counts = {paths[lang]: s.lines for lang, s in scans.items()}
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{p}: {n} lines" for p, n in counts.items())
        raise SourceError(f"source {name!r}: line-aligned files differ in length ({detail})")
    n = next(iter(counts.values()))
    tasks = [
        ReadTask(
            source=name,
            kind="text",
            languages=tuple(source.languages),
            start_line=i * chunk_lines + 1,
            n_lines=min(chunk_lines, n - i * chunk_lines),
            paths=paths,
            offsets={lang: scans[lang].offsets[i] for lang in paths},
        )
        for i in range((n + chunk_lines - 1) // chunk_lines)
    ]
    prints = [
        {"source": name, "path": p, "sha256": s.sha256, "bytes": s.size, "lines": s.lines}
        for p, s in zip(paths.values(), scans.values())
    ]
    return SourcePlan(tasks, prints, n)


def plan_table(source: TableSource, name: str, chunk_lines: int) -> SourcePlan:
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
                raise SourceError(f"{source.path}:1: no column {col!r} for language {lang!r} in header {header}")
            columns[lang] = header.index(col)
    scan = scan_file(source.path, chunk_lines, skip_header=source.kind == "tsv")
    first = 2 if source.kind == "tsv" else 1
    tasks = [
        ReadTask(
            source=name,
            kind=source.kind,
            languages=tuple(source.languages),
            start_line=first + i * chunk_lines,
            n_lines=min(chunk_lines, scan.lines - i * chunk_lines),
            paths={"": source.path},
            offsets={"": scan.offsets[i]},
            columns=columns,
            fields={lang: source.column(lang) for lang in source.languages},
        )
        for i in range(len(scan.offsets))
    ]
    prints = [{"source": name, "path": source.path, "sha256": scan.sha256, "bytes": scan.size, "lines": scan.lines}]
    return SourcePlan(tasks, prints, scan.lines)


def _first_line(path: str) -> str:
    try:
        with Location.of(path).open_input() as handle:
            raw = handle.readline()
    except FileNotFoundError:
        raise SourceError(f"{path}: file not found") from None
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8-sig").rstrip("\r\n")
    except UnicodeDecodeError:
        raise SourceError(f"{path}:1: the header is not valid UTF-8") from None


def plan_mined(source: MinedSource, name: str, chunk_lines: int) -> SourcePlan:
    """Read tasks over the rows of a mined pair file, checked against its mining manifest."""
    folder = source.path.rstrip("/")
    manifest_path = _in_folder(folder, mined.MANIFEST)
    try:
        manifest = mined.read_manifest(folder)
    except FileNotFoundError:
        raise SourceError(f"{manifest_path}: no mining manifest: not a finished `interlingua mine` output") from None
    except mined.MinedManifestError as exc:
        raise SourceError(f"{exc}; point the source at a folder `interlingua mine` wrote") from None
    entry = next((e for e in manifest.pairs.values() if sorted(e.languages) == sorted(source.languages)), None)
    if entry is None:
        raise SourceError(
            f"{manifest_path}: no mined pair of {source.languages}; it has "
            f"{[e.languages for e in manifest.pairs.values()]}"
        )
    path = _in_folder(folder, entry.file)
    pairs = Location.of(path)
    digest = pairs.sha256()
    if digest != entry.sha256:
        raise SourceError(f"{path}: its sha256 differs from the mining manifest's: the file changed after mining")
    rows = entry.rows
    tasks = [
        ReadTask(
            source=name,
            kind="mined",
            languages=tuple(source.languages),
            start_line=start + 1,
            n_lines=min(chunk_lines, rows - start),
            paths={"": path},
            score=source.min_score,
        )
        for start in range(0, rows, chunk_lines)
    ]
    return SourcePlan(tasks, [{"path": path, "sha256": digest, "bytes": pairs.size()}], rows)


def _in_folder(folder: str, name: str) -> str:
    """`name` in the mining output `folder` (BoundaryError for a name that leads out of it: `Location.join`),
    with `folder` as the source wrote it: a relative path stays relative in the messages and in the input
    records (the dataset's fingerprint)."""
    location = Location.of(folder)
    location.join(name)
    return os.path.join(folder, name) if location.on_this_host else f"{folder}/{name}"


def read_mined(task: ReadTask) -> Iterator[tuple[str, dict[str, str | None] | str]]:
    import pyarrow.parquet as pq

    table = pq.read_table(task.paths[""]).slice(task.start_line - 1, task.n_lines)
    texts = [table[f"{lang}_text"].to_pylist() for lang in task.languages]
    for i, score in enumerate(table["score"].to_pylist()):
        key = f"{task.source}:{task.start_line + i}"
        yield (
            key,
            ({lang: col[i] for lang, col in zip(task.languages, texts)} if score >= task.score else BELOW_MIN_SCORE),
        )


def _decode(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _lines(path: str, offset: int, n: int) -> Iterator[bytes]:
    with Location.of(path).open_input() as handle:
        handle.seek(offset)
        for i in range(n):
            line = handle.readline()
            if i == 0 and offset == 0:
                line = line.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark opens the file
            yield line.rstrip(b"\r\n")


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


def read_lines_task(task: ReadTask) -> Iterator[tuple[str, dict[str, str | None] | str]]:
    """(key, {lang: text or None}) for each record of a text or table chunk; (key, MALFORMED) if unparsable."""
    if task.kind == "text":
        streams = [_lines(task.paths[lang], task.offsets[lang], task.n_lines) for lang in task.languages]
        for i, raws in enumerate(zip(*streams)):
            key = f"{task.source}:{task.start_line + i}"
            yield key, {lang: _decode(raw) for lang, raw in zip(task.languages, raws)}
        return
    for i, raw in enumerate(_lines(task.paths[""], task.offsets[""], task.n_lines)):
        yield f"{task.source}:{task.start_line + i}", _parse_table_line(task, raw)
