"""Training batches streamed from the Parquet shards: bounded windows, per-window plans.

Each worker streams its own share of the training split and holds one window of it at a time:

    units    the row groups of the split's Parquet shards (`model.batching.shard_units`), each read whole
    epoch    a seeded permutation of the units; this worker's share is [rank::world], so the
             workers never see the same tuple in one epoch
    window   consecutive units of the share, up to `window_tuples` tuples (at least one unit)
    plan     within a window: a seeded permutation of its tuples (each drawn as often as its source's
             weight says: 0.5 half of them, 2 twice), a training path per draw, draws grouped by
             signature and by copy (a tuple's second draw never shares a batch with its first: it
             would be its own negative in the ranking loss), length-bucketed by token budget,
             batches shuffled

With a teacher, each batch carries the teacher's embeddings of its sources (or of all its languages:
`TeacherInput.every_language`) and of its tuples' pivot sentences (`ParallelCorpus.teacher_batch`).

The data position is (epoch, window, batch): a resumed worker reads the window it stopped in,
rebuilds the same plan and skips the batches it had consumed, reading nothing before it. A stream built
ahead by a worker process, on a GPU, is `model.prefetch`'s.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from core.teacher import TeacherInput
from model.batching import Pair, ParallelCorpus, Unit, read_units, token_budget_batches
from model.training_paths import Signature, TrainingPath, sample_signatures

# The version of `plan_window`'s draws: a position names a batch of one plan, so a stream resumes only
# positions of its own plan. 1: one tuple at a time (until 2026-11); 2: a window's draws at once;
# 3: a tuple drawn several times is batched once per copy (under 2, length bucketing put a tuple's two
# draws side by side: with source weight 2, over half of the batches held a tuple twice).
PLAN = 3


@dataclass
class DataPosition:
    """Where a worker's stream stands: the next batch is batch `batch` of window `window` of `epoch`,
    in windows planned by plan version `plan`."""

    epoch: int = 0
    window: int = 0
    batch: int = 0
    plan: int = PLAN

    @classmethod
    def from_dict(cls, values: Mapping[str, int]) -> DataPosition:
        """A saved position; one saved before plans had versions is plan 1's."""
        return cls(**{"plan": 1, **values})


@dataclass
class Batch:
    epoch: int
    signature: Signature
    sources: dict[str, Pair]
    targets: dict[str, Pair]
    teacher: dict[str, Pair] | None = None  # `ParallelCorpus.teacher_batch`, with a teacher
    # (B,) float32: each tuple's weight of its distillation terms (`TeacherInput.source_weights`); None: 1 each
    teacher_weight: torch.Tensor | None = None


def epoch_windows(
    units: Sequence[Unit], *, seed: int, epoch: int, rank: int, world: int, window_tuples: int
) -> list[list[Unit]]:
    """This worker's windows of one epoch: its share of a seeded permutation of the units, cut into
    runs of up to `window_tuples` tuples (a larger unit is a window of its own)."""
    order = np.random.default_rng([seed, epoch]).permutation(len(units))[rank::world]
    windows: list[list[Unit]] = []
    size = 0
    for i in order.tolist():
        if not windows or size + units[i].rows > window_tuples:
            windows.append([])
            size = 0
        windows[-1].append(units[i])
        size += units[i].rows
    return windows


def plan_window(
    corpus: ParallelCorpus,
    paths: Sequence[TrainingPath],
    *,
    seed: int,
    epoch: int,
    rank: int,
    window: int,
    max_tokens: int,
    monolingual: bool = False,
    source_weights: dict[str, float] | None = None,
) -> list[tuple[Signature, np.ndarray]]:
    """The batches of one window (see the module docstring); the same for the same inputs and `PLAN`. Without
    source weights every tuple is drawn once (the plan is the one before weights existed)."""
    rng = np.random.default_rng([seed, epoch, rank, window])
    if source_weights:
        draws = corpus.draws(source_weights, np.random.default_rng([seed, epoch, rank, window, 1]))
        order = rng.permutation(np.repeat(np.arange(corpus.size), draws))
    else:
        order = rng.permutation(corpus.size)
    copy = _copy_index(order)
    present = np.stack([corpus.lengths[lang][order] > 0 for lang in corpus.languages], axis=1)
    signatures, drawn = sample_signatures(paths, corpus.languages, present, rng, monolingual=monolingual)
    batches = []
    for k in sorted(range(len(signatures)), key=signatures.__getitem__):
        langs = signatures[k][0] + signatures[k][1]
        for c in range(int(copy.max(initial=0)) + 1):
            members = order[(drawn == k) & (copy == c)]  # in the window's permuted order; each tuple once
            costs = np.max([corpus.lengths[lang][members] for lang in langs], axis=0) + 1
            batches += [(signatures[k], members[chunk]) for chunk in token_budget_batches(costs, max_tokens)]
    shuffled = rng.permutation(len(batches))
    return [batches[i] for i in shuffled]


def _copy_index(order: np.ndarray) -> np.ndarray:
    """For each draw in `order`, how many draws of the same tuple come before it (0 for the first)."""
    by_tuple = np.argsort(order, kind="stable")
    ranked = order[by_tuple]
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])  # where each tuple's run begins
    runs = np.diff(np.r_[starts, len(order)])
    copy = np.empty(len(order), np.int64)
    copy[by_tuple] = np.arange(len(order)) - np.repeat(starts, runs)
    return copy


class BatchStream:
    """A worker's endless batches, epoch after epoch, from `position` on; `position` always names the
    next batch, so saving it with a checkpoint resumes the stream exactly. `digest` chains every batch
    handed out (its epoch, window and tuples): two streams that gave the same batches agree on it."""

    def __init__(
        self,
        units: Sequence[Unit],
        languages: Sequence[str],
        paths: Sequence[TrainingPath],
        *,
        seed: int,
        rank: int,
        world: int,
        max_tokens: int,
        window_tuples: int,
        monolingual: bool = False,
        source_weights: dict[str, float] | None = None,
        position: DataPosition | None = None,
        digest: str = "",
        teacher: TeacherInput | None = None,
    ) -> None:
        if len(units) < world:
            raise ValueError(
                f"{len(units)} Parquet row groups cannot be shared by {world} workers: "
                "prepare the dataset with more training shards (prepare.output.train_shards)"
            )
        self.units, self.languages, self.paths = list(units), list(languages), list(paths)
        self.seed, self.rank, self.world = seed, rank, world
        self.max_tokens, self.window_tuples, self.monolingual = max_tokens, window_tuples, monolingual
        self.source_weights = dict(source_weights or {})
        self.teacher = teacher
        self.position = position or DataPosition()
        if self.position.plan != PLAN:
            raise ValueError(
                f"data position {self.position} names a batch of plan {self.position.plan}, but this "
                f"version plans windows with plan {PLAN}: start a new epoch instead"
            )
        self.digest = digest
        self._loaded: tuple[int, int] | None = None
        self._corpus: ParallelCorpus | None = None
        self._plan: list[tuple[Signature, np.ndarray]] = []
        self._teacher_weight: np.ndarray | None = None  # the window's tuples' (N,), with teacher source weights
        self._windows: list[list[Unit]] = []

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        for _ in range(2 * len(self.units) + 2):  # windows that give no batch are skipped
            p = self.position
            corpus = self._load(p.epoch, p.window)
            if p.batch < len(self._plan):
                signature, rows = self._plan[p.batch]
                sources, targets = corpus.batch(signature, rows)
                teacher, teacher_weight = None, None
                if self.teacher is not None:
                    distilled = signature[0] + signature[1] if self.teacher.every_language else signature[0]
                    teacher = corpus.teacher_batch(distilled, rows, self.teacher.pivot)
                    if self._teacher_weight is not None:
                        teacher_weight = torch.from_numpy(self._teacher_weight[rows])
                self._chain(p, rows)
                self.position = DataPosition(p.epoch, p.window, p.batch + 1)
                return Batch(p.epoch, signature, sources, targets, teacher, teacher_weight)
            last = p.window + 1 >= len(self._windows)
            self.position = DataPosition(p.epoch + 1, 0, 0) if last else DataPosition(p.epoch, p.window + 1, 0)
        raise ValueError("no training batch can be formed: no tuple serves any training path")

    def _load(self, epoch: int, window: int) -> ParallelCorpus:
        """The corpus of the window, read and planned once (`_plan`)."""
        if self._loaded == (epoch, window) and self._corpus is not None:
            return self._corpus
        if self._loaded is None or self._loaded[0] != epoch:
            self._windows = epoch_windows(
                self.units,
                seed=self.seed,
                epoch=epoch,
                rank=self.rank,
                world=self.world,
                window_tuples=self.window_tuples,
            )
        self._corpus = read_units(
            self._windows[window],
            self.languages,
            keys=bool(self.source_weights),
            teacher=self.teacher.store if self.teacher is not None else None,
        )
        self._plan = plan_window(
            self._corpus,
            self.paths,
            seed=self.seed,
            epoch=epoch,
            rank=self.rank,
            window=window,
            max_tokens=self.max_tokens,
            monolingual=self.monolingual,
            source_weights=self.source_weights,
        )
        weights = self.teacher.source_weights if self.teacher is not None else None
        self._teacher_weight = self._corpus.source_weight(weights).astype(np.float32) if weights else None
        self._loaded = (epoch, window)
        return self._corpus

    def _chain(self, p: DataPosition, rows: np.ndarray) -> None:
        h = hashlib.blake2b(self.digest.encode(), digest_size=16)
        h.update(f"{p.epoch}/{p.window}/{p.batch}".encode())
        h.update(np.ascontiguousarray(rows, dtype=np.int64).tobytes())
        self.digest = h.hexdigest()
