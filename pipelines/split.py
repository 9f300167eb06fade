"""Deterministic train/dev/test splits with no repeated sentence in held-out data.

Every tuple gets u = hash(seed, key) in [0, 1). Held-out candidates are the
tuples with the smallest u (by size) or u below dev + test fractions (by
fraction). They are taken greedily in u order, skipping any tuple that repeats
a (language, sentence) already taken, so dev and test hold no duplicate
sentence in any language. Candidates not taken go back to train, and every
training tuple that shares a sentence with dev or test is dropped
(decontamination). The same input and config always give the same split.
"""
from __future__ import annotations

import hashlib
from typing import Any, Iterator

import apache_beam as beam

from pipelines.config import SplitConfig
from pipelines.counting import STATS, Tally
from pipelines.tokenizer import unit_hash

CONTAMINATED = "contaminated"
# Candidates drawn per held-out tuple wanted: room for the ones skipped as repeats.
CANDIDATE_MARGIN = 2

Tuple = tuple[str, dict[str, str]]


class HeldOutError(ValueError):
    """Too few distinct tuples for the dev/test sizes asked for."""


def sentence_ids(sentences: dict[str, str]) -> list[str]:
    """Short hashes of (language, normalized sentence): the unit of held-out overlap."""
    return [
        hashlib.blake2b(f"{lang}\x1f{text}".encode(), digest_size=12).hexdigest()
        for lang, text in sentences.items()
    ]


def select_held_out(
    candidates: list[tuple[float, Tuple]], config: SplitConfig
) -> Iterator[tuple[str, Tuple]]:
    """Yield (split, tuple) for every candidate: 'dev', 'test', or 'train' when not taken.

    When fewer distinct tuples exist than dev_size + test_size, the splits come
    out short; `check_held_out` reports that after the run.
    """
    wanted = config.held_out_size() if not config.by_fraction else len(candidates)
    taken: set[str] = set()
    n = 0
    for u, t in sorted(candidates, key=lambda c: (c[0], c[1][0])):
        ids = sentence_ids(t[1])
        if n >= wanted or any(i in taken for i in ids):
            yield "train", t
            continue
        taken.update(ids)
        if config.by_fraction:
            split = "dev" if u < config.dev_fraction else "test"
        else:
            split = "dev" if n < config.dev_size else "test"
        n += 1
        yield split, t


def check_held_out(config: SplitConfig, written: dict[str, int]) -> None:
    """Raise HeldOutError when the dev/test splits came out smaller than asked."""
    if config.by_fraction:
        return
    if written["dev"] < config.dev_size or written["test"] < config.test_size:
        raise HeldOutError(
            f"only {written['dev'] + written['test']} tuples without repeated sentences could be "
            f"held out, but prepare.split.dev_size + test_size = {config.held_out_size()}: lower them"
            + (" or set prepare.split.heldout_complete=false" if config.heldout_complete else "")
        )


class _DecontaminateFn(beam.DoFn):
    def start_bundle(self) -> None:
        self.tally = Tally()

    def process(self, t: Tuple, held_out: frozenset[str]) -> Iterator[Any]:
        if any(i in held_out for i in sentence_ids(t[1])):
            self.tally.drop_tuple(CONTAMINATED, t[1])
        else:
            yield t

    def finish_bundle(self) -> Iterator[Any]:
        yield from self.tally.flush()


class SplitTuples(beam.PTransform):
    """Tuples -> {'train', 'dev', 'test', 'stats'} PCollections."""

    def __init__(self, config: SplitConfig, languages: list[str]) -> None:
        super().__init__()
        self.config = config
        self.languages = frozenset(languages)

    def expand(self, tuples: beam.PCollection) -> Any:
        cfg = self.config
        complete = self.languages if cfg.heldout_complete else frozenset()
        hashed = tuples | "HashKeys" >> beam.Map(lambda t: (unit_hash("split", cfg.seed, t[0]), t))
        if cfg.by_fraction:
            threshold: Any = cfg.dev_fraction + cfg.test_fraction
        else:
            k = CANDIDATE_MARGIN * cfg.held_out_size() + 100
            threshold = beam.pvalue.AsSingleton(
                hashed
                | "EligibleHashes" >> beam.FlatMap(lambda h: [h[0]] if complete <= h[1][1].keys() else [])
                | "SmallestHashes" >> beam.combiners.Top.Smallest(k)
                | "Threshold" >> beam.Map(lambda xs: xs[-1] if len(xs) >= k else 1.0)
            )
        parts = hashed | "PickCandidates" >> beam.Partition(
            lambda h, _n, thr: 0 if h[0] <= thr and complete <= h[1][1].keys() else 1, 2, threshold
        )
        chosen = (
            parts[0]
            | "GatherCandidates" >> beam.combiners.ToList()
            | "SelectHeldOut" >> beam.FlatMap(lambda c: select_held_out(c, cfg))
        )
        by_split = chosen | "BySplit" >> beam.Partition(lambda s, _n: ("train", "dev", "test").index(s[0]), 3)
        dev = by_split[1] | "DevTuples" >> beam.Map(lambda s: s[1])
        test = by_split[2] | "TestTuples" >> beam.Map(lambda s: s[1])
        held_out_ids = beam.pvalue.AsSingleton(
            (dev, test)
            | "HeldOut" >> beam.Flatten()
            | "HeldOutSentences" >> beam.FlatMap(lambda t: sentence_ids(t[1]))
            | "GatherHeldOut" >> beam.combiners.ToList()
            | "AsSet" >> beam.Map(frozenset)
        )
        train = (
            (parts[1] | "Unhash" >> beam.Map(lambda h: h[1]),
             by_split[0] | "NotTaken" >> beam.Map(lambda s: s[1]))
            | "TrainPool" >> beam.Flatten()
            | "Decontaminate" >> beam.ParDo(_DecontaminateFn(), held_out_ids).with_outputs(
                STATS, main="kept")
        )
        return {"train": train.kept, "dev": dev, "test": test, STATS: train[STATS]}
