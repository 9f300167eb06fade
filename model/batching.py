"""Token ids in memory: what a training worker, the dev error and embedding read from the Parquet shards.

    Unit            one row group of one training shard, read whole (`shard_units`)
    ParallelCorpus  the token ids of some tuples, per language (flat values + offsets), with their keys
                    and, with a teacher (`core.teacher`), the teacher's embeddings of them read from the
                    same row groups of its files (`read_units`; tuples x languages x dimensions x 2 bytes)
    pad             right-padded id tensors; `token_budget_batches` cuts length buckets by token budget

How a worker streams its share of the units, a window at a time, is `model.stream`.

The one convention every caller shares: an encoder input ends with EOS
(as in LASER), a decoder target holds the bare ids (the decoder adds BOS/EOS).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from core.dataset import EOS_ID, PAD_ID, source_of
from core.location import Location
from core.teacher import TeacherStore, read_row_group
from model.training_paths import Signature

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
        end = (
            bisect.bisect_right(range(start + 1, len(order)), max_tokens, key=lambda i: (i - start + 1) * ranked[i])
            + start
            + 1
        )
        batches.append(order[start:end])
        start = end
    return batches


class ParallelCorpus:
    """Token ids of some tuples: per language, flat values + offsets; a tuple may lack languages. `keys`, when
    read, name each tuple (its source's name first: `source:...`)."""

    def __init__(
        self, languages: Sequence[str], columns: dict[str, pa.ListArray], keys: list[str] | None = None
    ) -> None:
        self.languages = list(languages)
        self.keys = keys
        self.values: dict[str, np.ndarray] = {}
        self.offsets: dict[str, np.ndarray] = {}
        self.lengths: dict[str, np.ndarray] = {}
        for lang in self.languages:
            col = columns[lang]
            offsets = col.offsets.to_numpy().astype(np.int64)
            self.values[lang] = col.values.to_numpy()[offsets[0] : offsets[-1]]
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
        weight = self.source_weight(weights)
        return np.floor(weight).astype(np.int64) + (rng.random(self.size) < weight - np.floor(weight))

    def source_weight(self, weights: Mapping[str, float]) -> np.ndarray:
        """Each tuple's source's weight (N,) float64, 1 for a source not named."""
        if self.keys is None:
            raise ValueError("source weights need the tuples' keys: read the corpus with them")
        return np.array([weights.get(source_of(key), 1.0) for key in self.keys], dtype=np.float64)

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
        return self.values[lang][start : start + self.lengths[lang][row]]

    def complete_rows(self) -> np.ndarray:
        """Rows that hold every language (dev/test tuples, for the similarity error)."""
        present = np.stack([self.lengths[lang] > 0 for lang in self.languages])
        return np.flatnonzero(present.all(axis=0))

    def token_counts(self, vocab_size: int) -> np.ndarray:
        return np.sum([np.bincount(v, minlength=vocab_size) for v in self.values.values()], axis=0)

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
        return (
            torch.from_numpy(self.teacher[lang][rows].astype(np.float32)),
            torch.from_numpy(self.teacher_has[lang][rows]),
        )

    def _pad(self, lang: str, rows: np.ndarray, *, eos: bool) -> Pair:
        """`pad` of `rows` in `lang`, gathered from the flat values at once."""
        lengths = self.lengths[lang][rows]
        starts = np.repeat(self.offsets[lang][rows] - np.cumsum(lengths) + lengths, lengths)
        return _padded(self.values[lang][starts + np.arange(int(lengths.sum()))], lengths, eos=eos)


@dataclass(frozen=True)
class Unit:
    """One row group of one Parquet shard: what a worker reads at once."""

    path: str
    row_group: int
    rows: int


def shard_units(files: Sequence[str | Path]) -> list[Unit]:
    """Every row group of the shards, in file order (from the Parquet footers: no data is read)."""
    units = []
    for path in files:
        meta = Location.of(path).open_parquet().metadata
        units += [
            Unit(str(path), i, meta.row_group(i).num_rows)
            for i in range(meta.num_row_groups)
            if meta.row_group(i).num_rows
        ]
    return units


def read_units(
    units: Sequence[Unit], languages: Sequence[str], *, keys: bool = False, teacher: TeacherStore | None = None
) -> ParallelCorpus:
    """The token ids of the units' tuples, in the given order (and their keys); with `teacher`, its
    embeddings of them, from the same row groups of its files (ValueError where their keys differ)."""
    columns = [f"{lang}_ids" for lang in languages] + (["key"] if keys or teacher else [])
    tables = [Location.of(u.path).open_parquet().read_row_group(u.row_group, columns=columns) for u in units]
    corpus = ParallelCorpus.from_table(pa.concat_tables(tables), languages)
    if teacher is not None:
        langs = [lang for lang in teacher.languages if lang in languages]
        parts = [read_row_group(teacher.file_for(u.path), u.row_group, langs) for u in units]
        for u, table, (keys_read, _, _) in zip(units, tables, parts):
            if keys_read != table.column("key").to_pylist():
                raise ValueError(
                    f"{teacher.file_for(u.path)}: row group {u.row_group} does not hold the tuples of "
                    f"{u.path}'s: the teacher embeddings are not of this dataset"
                )
        for lang in langs:
            corpus.teacher[lang] = np.concatenate([vectors[lang] for _, vectors, _ in parts])
            corpus.teacher_has[lang] = np.concatenate([has[lang] for _, _, has in parts])
    return corpus


def sample_corpus(units: Sequence[Unit], languages: Sequence[str], max_tuples: int) -> ParallelCorpus:
    """The first units in file order up to `max_tuples` tuples (at least one unit): the bounded sample
    that corpus statistics (LSI, token frequencies) are computed from."""
    chosen: list[Unit] = []
    size = 0
    for unit in units:
        if chosen and size + unit.rows > max_tuples:
            break
        chosen.append(unit)
        size += unit.rows
    return read_units(chosen, languages)


def dev_rows_by_source(dev: ParallelCorpus, limit: int | None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The dev rows the error is computed on: the complete ones, at most `limit` (None: all) shared evenly
    among the sources (the split is sorted by key, so by source: its first rows would all be the first
    source's; a source with fewer leaves its share to the others), and {source: positions among those rows}
    when there are several sources (none for one: its error is the dev error)."""
    rows = dev.complete_rows()
    names = dev.source_names()[rows]
    groups = {name: rows[names == name] for name in sorted(set(names.tolist()))}
    if limit is not None and len(rows) > limit:
        take, left = dict.fromkeys(groups, 0), limit
        while left:
            short = [name for name in groups if take[name] < len(groups[name])]
            share = max(1, left // len(short))
            for name in short:
                add = min(share, len(groups[name]) - take[name], left)
                take[name], left = take[name] + add, left - add
        groups = {name: g[: take[name]] for name, g in groups.items() if take[name]}
        rows = np.sort(np.concatenate(list(groups.values())))
    return rows, ({name: np.searchsorted(rows, g) for name, g in groups.items()} if len(groups) > 1 else {})
