"""Counting what a step forwards and drops, by reason, as Beam Metrics and as data.

A counting DoFn keeps a `Tally` while it handles one element and flushes it at
the end of that `process` call: to Beam `Metrics` (for the runner's UI) and as
`Stat` elements on the DoFn's one output, beside the elements it forwards.
`CountedParDo` applies such a DoFn and splits its output into
`{main: elements, "stats": (name, n) pairs}`, which the job sums into the
manifest. Beam retries bundles whole, so the data-based sums are exact on every
runner.

Why one output and no `finish_bundle`: Beam 2.77's DaskRunner gives every
tagged output of a multi-output ParDo (and of Partition) all of the ParDo's
elements, main and tagged alike, and drops whatever `finish_bundle` emits (it
collects a bundle's outputs before calling it). A single output split by two
Filters, with counts emitted from `process`, means the same on every runner.
Only steps that see many elements per call count often (a read task, a
shard); the others count rare events (drops), so flushing per call stays
nearly free.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

STATS = "stats"


@dataclass(frozen=True, slots=True)
class Stat:
    """A count on a step's output, beside the elements it forwards."""

    name: str
    n: int


class Tally:
    """Counts kept while a DoFn handles one element; flushed as Metrics and `Stat` elements."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def drop_tuple(self, reason: str, sentences: Iterable[str]) -> None:
        """A whole tuple dropped: count it, and each of its sentences, under `reason`."""
        self.counts[f"tuples/dropped/{reason}"] += 1
        for lang in sentences:
            self.counts[f"sentences/{lang}/dropped/{reason}"] += 1

    def flush(self) -> Iterator[Stat]:
        """Every count as a `Stat` (and a Beam counter); the tally is empty afterwards."""
        for name, n in self.counts.items():
            Metrics.counter("prepare", name).inc(n)
            yield Stat(name, n)
        self.counts.clear()


def _forwarded(element: Any) -> bool:
    return not isinstance(element, Stat)


def _stat_pair(element: Any) -> list[tuple[str, int]]:
    return [(element.name, element.n)] if isinstance(element, Stat) else []


class CountedParDo(beam.PTransform):
    """ParDo(fn, *side_inputs) -> {main: what fn forwards, "stats": (name, n) counts}.

    `fn` yields its elements and its `Stat` counts on its one output.
    """

    def __init__(self, fn: beam.DoFn, *side_inputs: Any, main: str = "tuples") -> None:
        super().__init__()
        self.fn, self.side_inputs, self.main = fn, side_inputs, main

    def expand(self, pcoll: beam.PCollection) -> dict[str, beam.PCollection]:
        out = pcoll | "Apply" >> beam.ParDo(self.fn, *self.side_inputs)
        return {
            self.main: out | "Forwarded" >> beam.Filter(_forwarded),
            STATS: out | "Counts" >> beam.FlatMap(_stat_pair),
        }
