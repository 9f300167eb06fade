"""The Beam DoFns over the plain readers and cleaners (sources.py, clean.py).

They live apart so that the commands that run no Beam job (`train`, `embed`,
`search`, `evaluate`, ...) can use the plain functions without importing Beam.
Each yields its elements and its counts (`Stat`s): apply it with `CountedParDo`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from pipelines.clean import TOO_FEW_LANGUAGES, Cleaner
from pipelines.config import PrepareConfig
from pipelines.counting import Tally
from pipelines.sources import MALFORMED, ReadTask, Skip, read_task

log = logging.getLogger(__name__)


class ReadTupleFn(beam.DoFn):
    """ReadTask -> (key, {lang: raw text or None for invalid UTF-8}), and the task's counts."""

    def process(self, task: ReadTask) -> Iterator[Any]:
        started, n, tally = time.monotonic(), 0, Tally()
        for key, record in read_task(task):
            n += 1
            tally.add("tuples/in")
            tally.add(f"sources/{task.source}/in")
            if record == MALFORMED:
                tally.drop_tuple(MALFORMED, [])
                log.warning("dropped malformed record %s", key)
                continue
            if isinstance(record, str):  # BELOW_MIN_SCORE: its sentences were read, and are dropped with it
                for lang in task.languages:
                    tally.add(f"sentences/{lang}/in")
                tally.drop_tuple(record, task.languages)
                continue
            kept: dict[str, str | None] = {}
            for lang, text in record.items():
                tally.add(f"sentences/{lang}/in")
                if isinstance(text, Skip):  # read, and not a translation (a fuzzy catalog entry, ...)
                    tally.add(f"sentences/{lang}/dropped/{text.reason}")
                else:
                    kept[lang] = text
            yield key, kept
        yield from tally.flush()
        where = {"bible": f"book {task.book}", "tmx": task.paths.get(""), "gettext": task.catalog}.get(
            task.kind, f"lines {task.start_line}+"
        )
        # one line per read task (66 for the Bible): for -v only; the job logs the totals
        log.debug("read %s %s: %d records (%.0f/s)", task.source, where, n, n / max(time.monotonic() - started, 1e-6))


class CleanTupleFn(beam.DoFn):
    """Normalize and filter each sentence; drop tuples left with too few languages."""

    def __init__(self, config: PrepareConfig) -> None:
        self.config = config

    def setup(self) -> None:
        self.cleaner = Cleaner(self.config.normalize, self.config.filters)

    def process(self, element: tuple[str, dict[str, str | None]]) -> Iterator[Any]:
        key, raw = element
        kept, dropped, matched = self.cleaner.clean_tuple(raw)
        tally = Tally()
        for lang, reason in dropped.items():
            tally.add(f"sentences/{lang}/dropped/{reason}")
        for lang, names in matched.items():
            for name in names:
                tally.add(f"normalized/{lang}/{name}")
        if len(kept) < self.config.filters.min_languages:
            tally.drop_tuple(TOO_FEW_LANGUAGES, kept)
        else:
            yield key, kept
        yield from tally.flush()
