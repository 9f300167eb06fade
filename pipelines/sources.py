"""Corpus sources: checks before any work starts, read tasks, and the readers.

`plan_reads` runs on the driver. It opens every input once (hashing it and
recording the byte offset of every `chunk_lines`-th line), so that bad input
fails before the pipeline starts, with the file and the counts, and so that
workers can read any chunk of any file directly. A `ReadTask` is one chunk;
`read_task` turns it into `(key, {lang: text, or None for invalid UTF-8})`
tuples, or `(key, MALFORMED)` for a record that cannot be parsed. Their DoFn
(`ReadTupleFn`) is in transforms.py, so that this module needs no Beam.

    read_task.py      ReadTask, SourcePlan and the MALFORMED / BELOW_MIN_SCORE markers
    source_files.py   text, TSV/JSONL and mined pair files: planned and read by chunk
    bible.py          the Bible database: a read task per book
    tmx.py            translation memories: a read task per TMX file, streamed
    catalogs.py       gettext catalogs (PO, MO): a read task per catalog, its files in every language
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from pipelines import bible, catalogs, source_files, tmx
from pipelines.bible import bible_db_path
from pipelines.catalogs import Skip
from pipelines.config import PrepareConfig
from pipelines.errors import SourceError
from pipelines.read_task import BELOW_MIN_SCORE, MALFORMED, ReadTask, SourcePlan
from pipelines.source_config import GettextSource, MinedSource, TableSource, TextSource, TmxSource, source_name

__all__ = [
    "BELOW_MIN_SCORE",
    "MALFORMED",
    "ReadTask",
    "Skip",
    "SourceError",
    "SourcePlan",
    "bible_db_path",
    "plan_reads",
    "read_task",
]


def plan_reads(config: PrepareConfig) -> SourcePlan:
    """Check every source and split it into read tasks. Raises SourceError on bad input."""
    tasks, prints, records = [], [], 0
    chunk = config.output.read_chunk_lines
    for i, source in enumerate(config.sources):
        name = source_name(source, i)
        if isinstance(source, TextSource):
            plan = source_files.plan_text(source, name, chunk)
        elif isinstance(source, TableSource):
            plan = source_files.plan_table(source, name, chunk)
        elif isinstance(source, MinedSource):
            plan = source_files.plan_mined(source, name, chunk)
        elif isinstance(source, TmxSource):
            plan = tmx.plan_tmx(source, name)
        elif isinstance(source, GettextSource):
            plan = catalogs.plan_gettext(source, name)
        else:
            plan = bible.plan_bible(source, name)
        if plan.records == 0:
            where = ", ".join(p["path"] for p in plan.fingerprints)
            raise SourceError(f"source {name!r} is empty: no records in {where}")
        tasks += plan.tasks
        prints += plan.fingerprints
        records += plan.records
    return SourcePlan(tasks, prints, records)


def read_task(task: ReadTask) -> Iterator[tuple[str, Mapping[str, str | Skip | None] | str]]:
    """Yield (key, {lang: text, None, or a Skip}) for each record of the chunk; (key, MALFORMED) if unparsable."""
    if task.kind == "bible":
        return bible.read_bible(task)
    if task.kind == "tmx":
        return tmx.read_tmx(task)
    if task.kind == "gettext":
        return catalogs.read_gettext(task)
    if task.kind == "mined":
        return source_files.read_mined(task)
    return source_files.read_lines_task(task)
