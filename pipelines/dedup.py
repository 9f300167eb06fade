"""Deduplication: exact duplicates of whole tuples, and near-duplicates by MinHash LSH."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np

from pipelines.config import DedupConfig
from pipelines.counting import STATS, CountedParDo, Tally

DUPLICATE = "duplicate"
NEAR_DUPLICATE = "near_duplicate"

Tuple = tuple[str, dict[str, str]]  # (key, {lang: normalized text})


def content_key(sentences: dict[str, str]) -> str:
    """A hash of a tuple's normalized text, for exact deduplication."""
    blob = "\x1e".join(f"{lang}\x1f{text}" for lang, text in sorted(sentences.items()))
    return hashlib.blake2b(blob.encode(), digest_size=16).hexdigest()


class KeepFirstFn(beam.DoFn):
    """Among tuples with equal content (or one LSH bucket), keep the smallest key; count the rest."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def process(self, element: tuple[str, Iterable[Tuple]]) -> Iterator[Any]:
        group = sorted(element[1], key=lambda t: t[0])
        tally = Tally()
        for _key, sentences in group[1:]:
            tally.drop_tuple(self.reason, sentences)
        yield group[0]
        yield from tally.flush()


class DedupTuples(beam.PTransform):
    """Exact duplicates of whole tuples, then (optionally) near-duplicates by MinHash LSH."""

    def __init__(self, config: DedupConfig) -> None:
        super().__init__()
        self.config = config

    def expand(self, tuples: beam.PCollection) -> Any:
        exact = (
            tuples
            | "KeyByContent" >> beam.Map(lambda t: (content_key(t[1]), t))
            | "GroupByContent" >> beam.GroupByKey()
            | "KeepFirstOfEqual" >> CountedParDo(KeepFirstFn(DUPLICATE), main="kept")
        )
        if not self.config.near_duplicates:
            return {"tuples": exact["kept"], STATS: exact[STATS]}
        near = exact["kept"] | "NearDedup" >> NearDedup(self.config)
        stats = (exact[STATS], near[STATS]) | "DedupStats" >> beam.Flatten()
        return {"tuples": near["kept"], STATS: stats}


class NearDedup(beam.PTransform):
    """MinHash LSH over character shingles of the whole tuple (datasketch signatures).

    Tuples -> {'kept': tuples, 'stats': (name, n) counts of the near-duplicates dropped}.
    """

    def __init__(self, config: DedupConfig) -> None:
        super().__init__()
        self.config = config

    def expand(self, tuples: beam.PCollection) -> Any:
        cfg = self.config
        marked = (
            tuples
            | "MinHashBands" >> beam.FlatMap(_lsh_bands, cfg)
            | "GroupByBand" >> beam.GroupByKey()
            | "NearDuplicatesInBand" >> beam.FlatMap(_near_duplicates_in_band, cfg.threshold)
            | "DistinctDuplicates" >> beam.Distinct()
            | "MarkDuplicate" >> beam.Map(lambda key: (key, True))
        )
        return (
            {"tuple": tuples | "KeyByKey" >> beam.Map(lambda t: (t[0], t[1])), "dup": marked}
            | "JoinMarks" >> beam.CoGroupByKey()
            | "DropNearDuplicates" >> CountedParDo(_DropMarkedFn(), main="kept")
        )


def _lsh_bands(t: Tuple, cfg: DedupConfig) -> Iterator[tuple[str, tuple[str, bytes]]]:
    from datasketch import MinHash

    text = " \x1f ".join(t[1][lang] for lang in sorted(t[1]))
    shingles = {text[i : i + cfg.shingle_chars] for i in range(max(len(text) - cfg.shingle_chars + 1, 1))}
    mh = MinHash(num_perm=cfg.num_perm, seed=1)
    mh.update_batch([s.encode() for s in shingles])
    values = np.asarray(mh.hashvalues, dtype=np.uint64)  # datasketch 2 keeps uint32: read back as uint64 below
    rows = cfg.num_perm // cfg.bands
    for band in range(cfg.bands):
        chunk = values[band * rows : (band + 1) * rows].tobytes()
        yield f"{band}:{hashlib.blake2b(chunk, digest_size=12).hexdigest()}", (t[0], values.tobytes())


def _near_duplicates_in_band(element: Any, threshold: float) -> Iterator[str]:

    members = sorted(element[1])
    if len(members) < 2:
        return
    first = np.frombuffer(members[0][1], dtype=np.uint64)
    for key, sig in members[1:]:
        if float(np.mean(np.frombuffer(sig, dtype=np.uint64) == first)) >= threshold:
            yield key


class _DropMarkedFn(beam.DoFn):
    def process(self, element: Any) -> Iterator[Any]:
        key, joined = element
        tally = Tally()
        for sentences in joined["tuple"]:
            if joined["dup"]:
                tally.drop_tuple(NEAR_DUPLICATE, sentences)
            else:
                yield key, sentences
        yield from tally.flush()
