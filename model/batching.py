"""Training batches: token ids of a split in flat arrays, per-epoch batch plans, padded tensors.

Each worker holds the token-id columns of the split as flat arrays (no Python
objects per sentence) and draws its batches from a deterministic plan:

    plan_epoch(seed, epoch, rank, world): a seeded permutation of all tuples,
      this worker's share [rank::world] (disjoint across workers), a training
      path per tuple, tuples grouped by signature, length-bucketed by token
      budget (`token_budget_batches`), batches shuffled.

The data position is therefore just the number of batches consumed: a resumed
worker regenerates the same plans and skips that many (`batch_stream`).

The one convention every caller shares: an encoder input ends with EOS
(as in LASER), a decoder target holds the bare ids (the decoder adds BOS/EOS).
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import torch

from model.training_paths import Signature, TrainingPath, sample_path
from pipelines.dataset import EOS_ID, PAD_ID


def pad(sequences: Sequence[np.ndarray], *, eos: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (B, T) and lengths (B,); with `eos`, EOS is appended to each sequence."""
    lengths = np.array([len(s) + eos for s in sequences], dtype=np.int64)
    if len(sequences) == 0:
        raise ValueError("cannot pad an empty batch")
    if lengths.min() == 0:
        raise ValueError("an empty token sequence cannot be encoded")
    ids = np.full((len(sequences), int(lengths.max())), PAD_ID, dtype=np.int64)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = seq
        if eos:
            ids[row, len(seq)] = EOS_ID
    return torch.from_numpy(ids), torch.from_numpy(lengths)


def token_budget_batches(costs: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """Split positions into batches of similar cost (length) with batch size x max cost <= max_tokens.

    Positions are sorted by cost (stable), so batches are length buckets; a
    position costlier than the budget gets a batch of its own.
    """
    order = np.argsort(costs, kind="stable")
    batches, start = [], 0
    for end in range(1, len(order) + 1):
        if end == len(order) or (end - start + 1) * costs[order[end]] > max_tokens:
            batches.append(order[start:end])
            start = end
    return batches


class ParallelCorpus:
    """Token ids of one split: per language, flat values + offsets; a tuple may lack languages."""

    def __init__(self, languages: Sequence[str], columns: dict[str, pa.ListArray]) -> None:
        self.languages = list(languages)
        self.values: dict[str, np.ndarray] = {}
        self.offsets: dict[str, np.ndarray] = {}
        self.lengths: dict[str, np.ndarray] = {}
        for lang in self.languages:
            col = columns[lang]
            offsets = col.offsets.to_numpy().astype(np.int64)
            self.values[lang] = col.values.to_numpy()[offsets[0]: offsets[-1]]
            self.offsets[lang] = offsets - offsets[0]
            self.lengths[lang] = np.diff(offsets).astype(np.int64)  # 0 where absent
        self.size = len(next(iter(self.lengths.values()))) if self.languages else 0

    @classmethod
    def from_table(cls, table: pa.Table, languages: Sequence[str]) -> ParallelCorpus:
        """From a split's table holding the `{lang}_ids` columns (`pipelines.dataset.read_split`)."""
        return cls(languages, {lang: table.column(f"{lang}_ids").combine_chunks() for lang in languages})

    @classmethod
    def read(cls, data_dir: str | Path, split: str, languages: Sequence[str]) -> ParallelCorpus:
        """The token ids of `languages` in one split of a prepared dataset."""
        from pipelines.dataset import read_split

        return cls.from_table(read_split(data_dir, split, [f"{lang}_ids" for lang in languages]), languages)

    def ids(self, lang: str, row: int) -> np.ndarray:
        start = self.offsets[lang][row]
        return self.values[lang][start: start + self.lengths[lang][row]]

    def available(self, row: int) -> list[str]:
        return [lang for lang in self.languages if self.lengths[lang][row] > 0]

    def complete_rows(self) -> np.ndarray:
        """Rows that hold every language (dev/test tuples, for the similarity error)."""
        present = np.stack([self.lengths[lang] > 0 for lang in self.languages])
        return np.flatnonzero(present.all(axis=0))

    def token_counts(self, vocab_size: int) -> np.ndarray:
        return sum(np.bincount(v, minlength=vocab_size) for v in self.values.values())

    def batch(self, signature: Signature, rows: np.ndarray) -> tuple[dict, dict]:
        """Tensors of one homogeneous batch: sources end with EOS, targets are bare ids."""
        sources_langs, target_langs = signature
        sources = {lang: pad([self.ids(lang, r) for r in rows], eos=True) for lang in sources_langs}
        targets = {lang: pad([self.ids(lang, r) for r in rows], eos=False) for lang in target_langs}
        return sources, targets


def plan_epoch(
    corpus: ParallelCorpus,
    paths: Sequence[TrainingPath],
    *,
    seed: int,
    epoch: int,
    rank: int = 0,
    world: int = 1,
    max_tokens: int,
    monolingual: bool = False,
) -> list[tuple[Signature, np.ndarray]]:
    """This worker's batches of one epoch (see the module docstring); the same for the same inputs."""
    rows = np.random.default_rng([seed, epoch]).permutation(corpus.size)[rank::world]
    rng = np.random.default_rng([seed, epoch, rank, 1])
    groups: dict[Signature, list[int]] = defaultdict(list)
    for row in rows.tolist():
        signature = sample_path(paths, corpus.available(row), rng, monolingual=monolingual)
        if signature is not None:
            groups[signature].append(row)
    batches = []
    for signature in sorted(groups):
        members = np.array(groups[signature], dtype=np.int64)
        langs = signature[0] + signature[1]
        costs = np.max([corpus.lengths[lang][members] for lang in langs], axis=0) + 1
        batches += [(signature, members[chunk]) for chunk in token_budget_batches(costs, max_tokens)]
    order = rng.permutation(len(batches))
    return [batches[i] for i in order]


def batch_stream(
    corpus: ParallelCorpus,
    paths: Sequence[TrainingPath],
    *,
    seed: int,
    rank: int,
    world: int,
    max_tokens: int,
    monolingual: bool = False,
    skip: int = 0,
) -> Iterator[tuple[int, Signature, np.ndarray]]:
    """Endless (epoch, signature, rows), epoch after epoch; the first `skip` batches are skipped."""
    epoch, seen = 0, 0
    while True:
        plan = plan_epoch(
            corpus, paths, seed=seed, epoch=epoch, rank=rank, world=world,
            max_tokens=max_tokens, monolingual=monolingual,
        )
        if not plan:
            raise ValueError("no training batch can be formed: no tuple serves any training path")
        if seen + len(plan) <= skip:
            seen += len(plan)
        else:
            for signature, rows in plan[max(0, skip - seen):]:
                yield epoch, signature, rows
            seen = skip
        epoch += 1

