"""Training batches streamed from the Parquet shards: bounded windows, per-window plans, padded tensors.

Each worker streams its own share of the training split and holds one window of it at a time:

    units    the row groups of the split's Parquet shards (`shard_units`), each read whole
    epoch    a seeded permutation of the units; this worker's share is [rank::world], so the
             workers never see the same tuple in one epoch
    window   consecutive units of the share, up to `window_tuples` tuples (at least one unit)
    plan     within a window: a seeded permutation of its tuples (each drawn as often as its source's
             weight says: 0.5 half of them, 2 twice), a training path per draw, draws grouped by
             signature and by copy (a tuple's second draw never shares a batch with its first: it
             would be its own negative in the ranking loss), length-bucketed by token budget,
             batches shuffled

With a teacher (`core.teacher`), a window also holds the teacher's embeddings of its tuples, read from the
same row groups of the teacher's files (tuples x languages x dimensions x 2 bytes: mind `window_tuples`), and
each batch carries those of its sources and of its tuples' pivot sentences.

The data position is (epoch, window, batch): a resumed worker reads the window it stopped in,
rebuilds the same plan and skips the batches it had consumed, reading nothing before it.

The one convention every caller shares: an encoder input ends with EOS
(as in LASER), a decoder target holds the bare ids (the decoder adds BOS/EOS).
"""
from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import torch

from model.training_paths import Signature, TrainingPath, sample_signatures
from core import storage
from core.dataset import EOS_ID, PAD_ID, source_of
from core.teacher import TeacherInput, TeacherStore, read_row_group

Pair = tuple[torch.Tensor, torch.Tensor]


def pad(sequences: Sequence[np.ndarray], *, eos: bool) -> Pair:
    """Right-padded ids (B, T) and lengths (B,); with `eos`, EOS is appended to each sequence."""
    if len(sequences) == 0:
        raise ValueError("cannot pad an empty batch")
    lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
    return _padded(np.concatenate(sequences) if lengths.sum() else np.zeros(0, np.int64), lengths, eos=eos)


def _padded(values: np.ndarray, lengths: np.ndarray, *, eos: bool) -> Pair:
    """`pad` of the sequences laid end to end in `values` with these `lengths`: one scatter, no loop
    over rows (the host builds every training batch; on a GPU its time is the step's)."""
    total = lengths + eos
    if total.min() == 0:
        raise ValueError("an empty token sequence cannot be encoded")
    ids = np.full((len(lengths), int(total.max())), PAD_ID, dtype=np.int64)
    positions = np.arange(ids.shape[1])
    ids[positions[None, :] < lengths[:, None]] = values  # row-major: each row's tokens in order
    if eos:
        ids[np.arange(len(lengths)), lengths] = EOS_ID
    return torch.from_numpy(ids), torch.from_numpy(total)


def token_budget_batches(costs: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """Split positions into batches of similar cost (length) with batch size x max cost <= max_tokens.

    Positions are sorted by cost (stable), so batches are length buckets; a
    position costlier than the budget gets a batch of its own.
    """
    order = np.argsort(costs, kind="stable")
    ranked = np.asarray(costs)[order]
    batches, start = [], 0
    while start < len(order):
        # a batch grows while (its size) x (the cost of its last, costliest member) fits the budget:
        # that product only grows along the sorted costs, so its end is a bisection
        end = bisect.bisect_right(range(start + 1, len(order)), max_tokens,
                                  key=lambda i: (i - start + 1) * ranked[i]) + start + 1
        batches.append(order[start:end])
        start = end
    return batches


class ParallelCorpus:
    """Token ids of some tuples: per language, flat values + offsets; a tuple may lack languages. `keys`, when
    read, name each tuple (its source's name first: `source:...`)."""

    def __init__(self, languages: Sequence[str], columns: dict[str, pa.ListArray],
                 keys: list[str] | None = None) -> None:
        self.languages = list(languages)
        self.keys = keys
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
        # a teacher's embeddings of the tuples, per language it has: (n, D) float16, and which rows have one
        self.teacher: dict[str, np.ndarray] = {}
        self.teacher_has: dict[str, np.ndarray] = {}

    @classmethod
    def from_table(cls, table: pa.Table, languages: Sequence[str]) -> ParallelCorpus:
        """From a table holding the `{lang}_ids` columns of a split (or part of one), and its keys if it has them."""
        keys = table.column("key").to_pylist() if "key" in table.column_names else None
        return cls(languages, {lang: table.column(f"{lang}_ids").combine_chunks() for lang in languages}, keys)

    def draws(self, weights: dict[str, float], rng: np.random.Generator) -> np.ndarray:
        """How many times each tuple is drawn: its source's weight (1 for a source not named), its whole part
        always and its fraction at random (`rng`)."""
        if not weights:
            return np.ones(self.size, np.int64)
        if self.keys is None:
            raise ValueError("source weights need the tuples' keys: read the corpus with them")
        weight = np.array([weights.get(source_of(key), 1.0) for key in self.keys])
        return np.floor(weight).astype(np.int64) + (rng.random(self.size) < weight - np.floor(weight))

    @classmethod
    def read(cls, data_dir: str | Path, split: str, languages: Sequence[str], *, keys: bool = False) -> ParallelCorpus:
        """The token ids of `languages` in a whole split of a prepared dataset (dev, test: small), with the
        tuples' keys when `keys`."""
        from core.dataset import read_split

        columns = [f"{lang}_ids" for lang in languages] + (["key"] if keys else [])
        return cls.from_table(read_split(data_dir, split, columns), languages)

    def source_names(self) -> np.ndarray:
        """Each tuple's source (the first part of its key)."""
        if self.keys is None:
            raise ValueError("the tuples' sources are in their keys: read the corpus with them")
        return np.array([source_of(key) for key in self.keys])

    def ids(self, lang: str, row: int) -> np.ndarray:
        start = self.offsets[lang][row]
        return self.values[lang][start: start + self.lengths[lang][row]]

    def complete_rows(self) -> np.ndarray:
        """Rows that hold every language (dev/test tuples, for the similarity error)."""
        present = np.stack([self.lengths[lang] > 0 for lang in self.languages])
        return np.flatnonzero(present.all(axis=0))

    def token_counts(self, vocab_size: int) -> np.ndarray:
        return sum(np.bincount(v, minlength=vocab_size) for v in self.values.values())

    def batch(self, signature: Signature, rows: np.ndarray) -> tuple[dict[str, Pair], dict[str, Pair]]:
        """Tensors of one homogeneous batch: sources end with EOS, targets are bare ids."""
        sources_langs, target_langs = signature
        sources = {lang: self._pad(lang, rows, eos=True) for lang in sources_langs}
        targets = {lang: self._pad(lang, rows, eos=False) for lang in target_langs}
        return sources, targets

    def teacher_batch(self, languages: Sequence[str], rows: np.ndarray, pivot: str | None) -> dict[str, Pair]:
        """The teacher's embeddings of `rows` in each of `languages` it has, and in `pivot` under
        `model.nmt.PIVOT`: (vectors (B, D) float32, which rows have one (B,))."""
        from model.nmt import PIVOT

        out = {lang: self._teacher(lang, rows) for lang in languages if lang in self.teacher}
        if pivot in self.teacher:
            out[PIVOT] = self._teacher(pivot, rows)
        return out

    def _teacher(self, lang: str, rows: np.ndarray) -> Pair:
        return (torch.from_numpy(self.teacher[lang][rows].astype(np.float32)),
                torch.from_numpy(self.teacher_has[lang][rows]))

    def _pad(self, lang: str, rows: np.ndarray, *, eos: bool) -> Pair:
        """`pad` of `rows` in `lang`, gathered from the flat values at once."""
        lengths = self.lengths[lang][rows]
        starts = np.repeat(self.offsets[lang][rows] - np.cumsum(lengths) + lengths, lengths)
        return _padded(self.values[lang][starts + np.arange(int(lengths.sum()))], lengths, eos=eos)


# --- the stream -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Unit:
    """One row group of one Parquet shard: what a worker reads at once."""

    path: str
    row_group: int
    rows: int


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


def shard_units(files: Sequence[str | Path]) -> list[Unit]:
    """Every row group of the shards, in file order (from the Parquet footers: no data is read)."""
    units = []
    for path in files:
        meta = storage.open_parquet(path).metadata
        units += [Unit(str(path), i, meta.row_group(i).num_rows) for i in range(meta.num_row_groups)
                  if meta.row_group(i).num_rows]
    return units


def epoch_windows(units: Sequence[Unit], *, seed: int, epoch: int, rank: int, world: int,
                  window_tuples: int) -> list[list[Unit]]:
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


def read_units(units: Sequence[Unit], languages: Sequence[str], *, keys: bool = False,
               teacher: TeacherStore | None = None) -> ParallelCorpus:
    """The token ids of the units' tuples, in the given order (and their keys); with `teacher`, its
    embeddings of them, from the same row groups of its files (ValueError where their keys differ)."""
    columns = [f"{lang}_ids" for lang in languages] + (["key"] if keys or teacher else [])
    tables = [storage.open_parquet(u.path).read_row_group(u.row_group, columns=columns) for u in units]
    corpus = ParallelCorpus.from_table(pa.concat_tables(tables), languages)
    if teacher is not None:
        langs = [lang for lang in teacher.languages if lang in languages]
        parts = [read_row_group(teacher.file_for(u.path), u.row_group, langs) for u in units]
        for u, table, (keys_read, _, _) in zip(units, tables, parts):
            if keys_read != table.column("key").to_pylist():
                raise ValueError(f"{teacher.file_for(u.path)}: row group {u.row_group} does not hold the tuples of "
                                 f"{u.path}'s: the teacher embeddings are not of this dataset")
        for lang in langs:
            corpus.teacher[lang] = np.concatenate([vectors[lang] for _, vectors, _ in parts])
            corpus.teacher_has[lang] = np.concatenate([has[lang] for _, _, has in parts])
    return corpus


def plan_window(corpus: ParallelCorpus, paths: Sequence[TrainingPath], *, seed: int, epoch: int, rank: int,
                window: int, max_tokens: int, monolingual: bool = False,
                source_weights: dict[str, float] | None = None) -> list[tuple[Signature, np.ndarray]]:
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

    def __init__(self, units: Sequence[Unit], languages: Sequence[str], paths: Sequence[TrainingPath], *,
                 seed: int, rank: int, world: int, max_tokens: int, window_tuples: int,
                 monolingual: bool = False, source_weights: dict[str, float] | None = None,
                 position: DataPosition | None = None, digest: str = "", teacher: TeacherInput | None = None) -> None:
        if len(units) < world:
            raise ValueError(f"{len(units)} Parquet row groups cannot be shared by {world} workers: "
                             "prepare the dataset with more training shards (prepare.output.train_shards)")
        self.units, self.languages, self.paths = list(units), list(languages), list(paths)
        self.seed, self.rank, self.world = seed, rank, world
        self.max_tokens, self.window_tuples, self.monolingual = max_tokens, window_tuples, monolingual
        self.source_weights = dict(source_weights or {})
        self.teacher = teacher
        self.position = position or DataPosition()
        if self.position.plan != PLAN:
            raise ValueError(f"data position {self.position} names a batch of plan {self.position.plan}, but this "
                             f"version plans windows with plan {PLAN}: start a new epoch instead")
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
            self._load(p.epoch, p.window)
            if p.batch < len(self._plan):
                signature, rows = self._plan[p.batch]
                sources, targets = self._corpus.batch(signature, rows)
                teacher = (self._corpus.teacher_batch(signature[0], rows, self.teacher.pivot)
                           if self.teacher is not None else None)
                self._chain(p, rows)
                self.position = DataPosition(p.epoch, p.window, p.batch + 1)
                return Batch(p.epoch, signature, sources, targets, teacher)
            last = p.window + 1 >= len(self._windows)
            self.position = DataPosition(p.epoch + 1, 0, 0) if last else DataPosition(p.epoch, p.window + 1, 0)
        raise ValueError("no training batch can be formed: no tuple serves any training path")

    def _load(self, epoch: int, window: int) -> None:
        if self._loaded == (epoch, window):
            return
        if self._loaded is None or self._loaded[0] != epoch:
            self._windows = epoch_windows(self.units, seed=self.seed, epoch=epoch, rank=self.rank,
                                          world=self.world, window_tuples=self.window_tuples)
        self._corpus = read_units(self._windows[window], self.languages, keys=bool(self.source_weights),
                                  teacher=self.teacher.store if self.teacher is not None else None)
        self._plan = plan_window(self._corpus, self.paths, seed=self.seed, epoch=epoch, rank=self.rank,
                                 window=window, max_tokens=self.max_tokens, monolingual=self.monolingual,
                                 source_weights=self.source_weights)
        self._loaded = (epoch, window)

    def _chain(self, p: DataPosition, rows: np.ndarray) -> None:
        h = hashlib.blake2b(self.digest.encode(), digest_size=16)
        h.update(f"{p.epoch}/{p.window}/{p.batch}".encode())
        h.update(np.ascontiguousarray(rows, dtype=np.int64).tobytes())
        self.digest = h.hexdigest()


def sample_corpus(units: Sequence[Unit], languages: Sequence[str], max_tuples: int) -> ParallelCorpus:
    """The first units in file order up to `max_tuples` tuples (at least one unit): the bounded sample
    that corpus statistics (LSI, token frequencies) are computed from."""
    chosen, size = [], 0
    for unit in units:
        if chosen and size + unit.rows > max_tuples:
            break
        chosen.append(unit)
        size += unit.rows
    return read_units(chosen, languages)


class _StreamSource(torch.utils.data.IterableDataset):
    """A `BatchStream`, rebuilt in a DataLoader worker process, as plain values the loader can pin:
    (epoch, signature, sources, targets, the position after the batch, the digest after it, the teacher's
    embeddings or None)."""

    def __init__(self, stream: BatchStream) -> None:
        self.args = dict(units=stream.units, languages=stream.languages, paths=stream.paths, seed=stream.seed,
                         rank=stream.rank, world=stream.world, max_tokens=stream.max_tokens,
                         window_tuples=stream.window_tuples, monolingual=stream.monolingual,
                         source_weights=stream.source_weights, position=stream.position, digest=stream.digest,
                         teacher=stream.teacher)

    def __iter__(self):
        stream = BatchStream(**self.args)
        for batch in stream:
            p = stream.position
            yield (batch.epoch, batch.signature, batch.sources, batch.targets, (p.epoch, p.window, p.batch, p.plan),
                   stream.digest, batch.teacher)


class PrefetchedStream:
    """A `BatchStream` whose next `ahead` batches are built by a worker process (torch's DataLoader)
    while the model trains on the current one, in pinned memory when `pin_memory` (for a GPU's
    asynchronous copies). The batches, `position` and `digest` are the stream's own: `position`
    names the batch after the last one handed out, so a checkpoint resumes exactly as without it."""

    def __init__(self, stream: BatchStream, *, ahead: int, pin_memory: bool = False) -> None:
        self.position, self.digest = stream.position, stream.digest
        loader = torch.utils.data.DataLoader(
            _StreamSource(stream), batch_size=None, num_workers=1, prefetch_factor=ahead, pin_memory=pin_memory,
            multiprocessing_context="spawn",  # a fork of a Ray worker (threads, gRPC) is not safe
        )
        self._batches = iter(loader)

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        epoch, signature, sources, targets, position, digest, teacher = next(self._batches)
        self.position, self.digest = DataPosition(*position), digest
        # the loader hands tuples back as lists
        return Batch(epoch, (tuple(signature[0]), tuple(signature[1])),
                     {lang: tuple(pair) for lang, pair in sources.items()},
                     {lang: tuple(pair) for lang, pair in targets.items()},
                     {lang: tuple(pair) for lang, pair in teacher.items()} if teacher is not None else None)

    def close(self) -> None:
        """Stops the worker process (it also stops when this object is collected)."""
        self._batches._shutdown_workers()


def prefetched(stream: BatchStream, ahead: int, *, pin_memory: bool = False) -> BatchStream | PrefetchedStream:
    """`stream` with `ahead` batches built in a worker process; `stream` itself when `ahead` is 0."""
    return PrefetchedStream(stream, ahead=ahead, pin_memory=pin_memory) if ahead else stream
