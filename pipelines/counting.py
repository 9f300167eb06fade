"""Counting what a step forwards and drops, by reason, as Beam Metrics and as data.

A DoFn keeps a `Tally` per bundle and flushes it in `finish_bundle`: to Beam
`Metrics` (for the runner's UI) and as `(name, n)` elements on the `stats`
output, which the job sums into the manifest. Beam retries bundles whole, so
the data-based sums are exact on every runner.
"""
from __future__ import annotations

import collections
from typing import Iterable, Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

STATS = "stats"


class Tally:
    """Counts kept in a DoFn during a bundle; flushed as Metrics and `stats` elements.

    Counting per bundle, not per element, keeps the accounting nearly free.
    """

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def drop_tuple(self, reason: str, sentences: Iterable[str]) -> None:
        """A whole tuple dropped: count it, and each of its sentences, under `reason`."""
        self.counts[f"tuples/dropped/{reason}"] += 1
        for lang in sentences:
            self.counts[f"sentences/{lang}/dropped/{reason}"] += 1

    def flush(self) -> Iterator[beam.pvalue.TaggedOutput]:
        for name, n in self.counts.items():
            Metrics.counter("prepare", name).inc(n)
            yield beam.pvalue.TaggedOutput(
                STATS, WindowedValue((name, n), MIN_TIMESTAMP, [GlobalWindow()])
            )
        self.counts.clear()
