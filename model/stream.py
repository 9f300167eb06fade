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

With a teacher, each batch carries the teacher's embeddings of its sources and of its tuples' pivot
sentences (`ParallelCorpus.teacher_batch`).

The data position is (epoch, window, batch): a resumed worker reads the window it stopped in,
rebuilds the same plan and skips the batches it had consumed, reading nothing before it.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import sys
from collections.abc import Iterator, Sequence
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
    def from_dict(cls, values: dict) -> DataPosition:
        """A saved position; one saved before plans had versions is plan 1's."""
        return cls(**{"plan": 1, **values})


@dataclass
class Batch:
    epoch: int
    signature: Signature
    sources: dict[str, Pair]
    targets: dict[str, Pair]
    teacher: dict[str, Pair] | None = None  # `ParallelCorpus.teacher_batch`, with a teacher


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
                teacher = (
                    corpus.teacher_batch(signature[0], rows, self.teacher.pivot) if self.teacher is not None else None
                )
                self._chain(p, rows)
                self.position = DataPosition(p.epoch, p.window, p.batch + 1)
                return Batch(p.epoch, signature, sources, targets, teacher)
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
        self._loaded = (epoch, window)
        return self._corpus

    def _chain(self, p: DataPosition, rows: np.ndarray) -> None:
        h = hashlib.blake2b(self.digest.encode(), digest_size=16)
        h.update(f"{p.epoch}/{p.window}/{p.batch}".encode())
        h.update(np.ascontiguousarray(rows, dtype=np.int64).tobytes())
        self.digest = h.hexdigest()


class _StreamSource(torch.utils.data.IterableDataset):
    """A `BatchStream`, rebuilt in a DataLoader worker process, as plain values the loader can pin:
    (epoch, signature, sources, targets, the position after the batch, the digest after it, the teacher's
    embeddings or None)."""

    def __init__(self, stream: BatchStream) -> None:
        self.args = dict(
            units=stream.units,
            languages=stream.languages,
            paths=stream.paths,
            seed=stream.seed,
            rank=stream.rank,
            world=stream.world,
            max_tokens=stream.max_tokens,
            window_tuples=stream.window_tuples,
            monolingual=stream.monolingual,
            source_weights=stream.source_weights,
            position=stream.position,
            digest=stream.digest,
            teacher=stream.teacher,
        )

    def __iter__(self):
        stream = BatchStream(**self.args)
        for batch in stream:
            p = stream.position
            yield (
                batch.epoch,
                batch.signature,
                batch.sources,
                batch.targets,
                (p.epoch, p.window, p.batch, p.plan),
                stream.digest,
                batch.teacher,
            )


def _exit_without_finalizing(worker_id: int) -> None:
    """The DataLoader worker's `worker_init_fn`: when its loop has ended, the process exits as a forked child
    does (`os._exit` after the work, as multiprocessing's fork start method ends every child), not through the
    interpreter's finalization.

    Why: on close the worker stops its loop and closes its result queue without waiting for the queue's feeder
    thread (torch's `_worker_loop`: `cancel_join_thread`). That daemon thread may still be pickling a prefetched
    batch, inside torch's C++ `share_fd` with the GIL released. A spawned child then finalizes the interpreter,
    which ends daemon threads as they retake the GIL, by a forced unwind; through torch's C++ frame that unwind
    calls `std::terminate` ("terminate called without an active exception", SIGABRT), and the trainer's
    SIGCHLD handler raises. Seen in 5 of 20 open/consume/close cycles on a loaded 2-core machine;
    `benchmarks/prefetch_close.py` counts them. Nothing is lost: the batches still queued were never going to
    be read. atexit handlers run before daemon threads are stopped, so this one ends the process first."""
    atexit.register(_exit_now)


def _exit_now() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a broken pipe: nothing more can be said
            pass
    os._exit(0)


class PrefetchedStream:
    """A `BatchStream` whose next `ahead` batches are built by a worker process (torch's DataLoader)
    while the model trains on the current one, in pinned memory when `pin_memory` (for a GPU's
    asynchronous copies). The batches, `position` and `digest` are the stream's own: `position`
    names the batch after the last one handed out, so a checkpoint resumes exactly as without it."""

    def __init__(self, stream: BatchStream, *, ahead: int, pin_memory: bool = False) -> None:
        self.position, self.digest = stream.position, stream.digest
        loader = torch.utils.data.DataLoader(
            _StreamSource(stream),
            batch_size=None,
            num_workers=1,
            prefetch_factor=ahead,
            pin_memory=pin_memory,
            multiprocessing_context="spawn",  # a fork of a Ray worker (threads, gRPC) is not safe
            worker_init_fn=_exit_without_finalizing,
        )
        self._batches: Iterator | None = iter(loader)

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        if self._batches is None:
            raise ValueError("the prefetched stream was closed")
        epoch, signature, sources, targets, position, digest, teacher = next(self._batches)
        self.position, self.digest = DataPosition(*position), digest
        # the loader hands tuples back as lists
        return Batch(
            epoch,
            (tuple(signature[0]), tuple(signature[1])),
            {lang: tuple(pair) for lang, pair in sources.items()},
            {lang: tuple(pair) for lang, pair in targets.items()},
            {lang: tuple(pair) for lang, pair in teacher.items()} if teacher is not None else None,
        )

    def close(self) -> None:
        """Stops the worker process and waits for it (it also stops when this object is collected): the
        loader's iterator shuts its workers down when it is released, which is the loader's public way."""
        self._batches = None


def prefetched(stream: BatchStream, ahead: int, *, pin_memory: bool = False) -> BatchStream | PrefetchedStream:
    """`stream` with `ahead` batches built in a worker process; `stream` itself when `ahead` is 0."""
    return PrefetchedStream(stream, ahead=ahead, pin_memory=pin_memory) if ahead else stream
