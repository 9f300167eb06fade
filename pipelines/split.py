"""Deterministic train/dev/test splits with no repeated sentence in held-out data.

Every tuple gets u = hash(seed, key) in [0, 1). Held-out candidates are each
source's tuples with the smallest u (by size) or u below dev + test fractions
(by fraction). They are taken greedily in u order, skipping any tuple that
repeats a (language, sentence) already taken, so dev and test hold no duplicate
sentence in any language. By size, the sources take turns (one tuple each, in
the order of their names), so each source gets an equal share of dev and of
test, and a source with fewer tuples leaves the rest of its share to the others;
by fraction, each source gives its fraction. Candidates not taken go back to
train, and every training tuple that shares a sentence with dev or test is
dropped (decontamination). The same input and config always give the same split.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from core.dataset import source_of
from pipelines.config import SplitConfig
from pipelines.counting import STATS, CountedParDo, Tally
from pipelines.errors import HeldOutError
from pipelines.joins import JoinSingleton
from pipelines.tokenizer import unit_hash

CONTAMINATED = "contaminated"
# Candidates drawn per held-out tuple wanted: room for the ones skipped as repeats.
CANDIDATE_MARGIN = 2

Tuple = tuple[str, dict[str, str]]


def sentence_ids(sentences: dict[str, str]) -> list[str]:
    """Short hashes of (language, normalized sentence): the unit of held-out overlap."""
    return [
        hashlib.blake2b(f"{lang}\x1f{text}".encode(), digest_size=12).hexdigest() for lang, text in sentences.items()
    ]


def select_held_out(candidates: list[tuple[float, Tuple]], config: SplitConfig) -> Iterator[tuple[str, Tuple]]:
    """Yield (split, tuple) for every candidate: 'dev', 'test', or 'train' when not taken.

    When fewer distinct tuples exist than dev_size + test_size, the splits come
    out short; `check_held_out` reports that after the run.
    """
    ordered = sorted(candidates, key=lambda c: (c[0], c[1][0]))
    taken: set[str] = set()

    def takes(t: Tuple) -> bool:
        """Whether `t` repeats no sentence held out so far (then its sentences are held out too)."""
        ids = sentence_ids(t[1])
        if any(i in taken for i in ids):
            return False
        taken.update(ids)
        return True

    if config.by_fraction:
        for u, t in ordered:
            yield ("train" if not takes(t) else "dev" if u < config.fractions()[0] else "test"), t
        return
    queues: dict[str, deque[Tuple]] = {}  # each source's candidates, in u order
    for _, t in ordered:
        queues.setdefault(source_of(t[0]), deque()).append(t)
    wanted, n = config.held_out_size(), 0
    while n < wanted and any(queues.values()):
        for source in sorted(queues):  # a turn: each source's next tuple that repeats no taken sentence
            queue = queues[source]
            while queue and n < wanted:
                t = queue.popleft()
                if not takes(t):
                    yield "train", t
                    continue
                yield ("dev" if n < config.sizes()[0] else "test"), t
                n += 1
                break
    for queue in queues.values():
        for t in queue:
            yield "train", t


def check_held_out(config: SplitConfig, written: dict[str, int], trained_on: dict[str, int] | None = None) -> None:
    """Raise HeldOutError when the dev/test splits came out smaller than asked. `trained_on`: split -> tuples
    held out, then dropped as another dataset's training data (`split.decontaminate_against`): the split did
    hold them out, and the manifest counts them."""
    if config.by_fraction:
        return
    held = {s: written[s] + (trained_on or {}).get(s, 0) for s in ("dev", "test")}
    dev_size, test_size = config.sizes()
    if held["dev"] < dev_size or held["test"] < test_size:
        raise HeldOutError(
            f"only {held['dev'] + held['test']} tuples without repeated sentences could be "
            f"held out, but prepare.split.dev_size + test_size = {config.held_out_size()}: lower them"
            + (" or set prepare.split.heldout_complete=false" if config.heldout_complete else "")
        )


class _DecontaminateFn(beam.DoFn):
    """(held-out index, tuples) -> every tuple not held out, unless it shares a sentence with
    dev or test (then counted)."""

    def process(self, group: tuple[tuple[frozenset[str], frozenset[str]], list[Tuple]]) -> Iterator[Any]:
        (keys, sentences), tuples = group
        tally = Tally()
        for t in tuples:
            if t[0] in keys:
                continue  # it is in dev or test
            if any(i in sentences for i in sentence_ids(t[1])):
                tally.drop_tuple(CONTAMINATED, t[1])
            else:
                yield t
        yield from tally.flush()


def _held_out_index(tuples: list[Tuple]) -> tuple[frozenset[str], frozenset[str]]:
    """(keys, sentence ids) of the dev and test tuples."""
    return frozenset(k for k, _ in tuples), frozenset(i for _, s in tuples for i in sentence_ids(s))


class SplitTuples(beam.PTransform):
    """Tuples -> {'train', 'dev', 'test', 'stats'} PCollections.

    The candidates (the smallest hashes, or those under the fractions) are
    gathered in one place and split there; every tuple then goes to train
    unless it was held out or is contaminated, so the tuples pass through one
    stage that waits for the held-out set, not two. The held-out index reaches
    them by `JoinSingleton` (a side input; on Dask a shuffle join).
    """

    def __init__(self, config: SplitConfig, languages: list[str]) -> None:
        super().__init__()
        self.config = config
        self.languages = frozenset(languages)

    def expand(self, tuples: beam.PCollection) -> Any:
        cfg = self.config
        complete = self.languages if cfg.heldout_complete else frozenset()
        hashed = tuples | "HashEligible" >> beam.FlatMap(
            lambda t: [(unit_hash("split", cfg.seed, t[0]), t)] if complete <= t[1].keys() else []
        )
        if cfg.by_fraction:
            threshold = sum(cfg.fractions())
            candidates = (
                hashed
                | "UnderFractions" >> beam.Filter(lambda h: h[0] <= threshold)
                # without_defaults: a global combine with a default re-reads its whole
                # output as a side input (deep-sized by Beam's state cache)
                | "GatherCandidates" >> beam.CombineGlobally(beam.combiners.ToListCombineFn()).without_defaults()
            )
        else:
            # each source's smallest hashes, enough for the whole held-out set should it be the only one
            k = CANDIDATE_MARGIN * cfg.held_out_size() + 100
            candidates = (
                hashed
                | "BySource" >> beam.Map(lambda h: (source_of(h[1][0]), h))
                | "SmallestHashes"
                >> beam.CombinePerKey(beam.combiners.TopCombineFn(k, key=lambda h: (h[0], h[1][0]), reverse=True))
                | "SourceCandidates" >> beam.Values()
                | "GatherCandidates" >> beam.CombineGlobally(beam.combiners.ToListCombineFn()).without_defaults()
                | "Flatten" >> beam.Map(lambda lists: [c for found in lists for c in found])
            )
        chosen = candidates | "SelectHeldOut" >> beam.FlatMap(
            lambda c: [(s, t) for s, t in select_held_out(c, cfg) if s != "train"]
        )
        # two filters, not a Partition: see pipelines.counting on multi-output ParDos
        dev = chosen | "DevTuples" >> beam.FlatMap(lambda s: [s[1]] if s[0] == "dev" else [])
        test = chosen | "TestTuples" >> beam.FlatMap(lambda s: [s[1]] if s[0] == "test" else [])
        index = (
            chosen
            | "HeldOutTuples" >> beam.Map(lambda s: s[1])
            | "GatherHeldOut" >> beam.CombineGlobally(beam.combiners.ToListCombineFn()).without_defaults()
            | "Index" >> beam.Map(_held_out_index)
        )
        train = (
            {"elements": tuples, "value": index}
            | "JoinHeldOut" >> JoinSingleton(key=lambda t: t[0], default=(frozenset(), frozenset()))
            | "Decontaminate" >> CountedParDo(_DecontaminateFn(), main="kept")
        )
        return {"train": train["kept"], "dev": dev, "test": test, STATS: train[STATS]}
