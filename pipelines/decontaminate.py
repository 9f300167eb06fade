"""Held-out tuples that another dataset trains on: dropped from dev and test (`prepare.split.decontaminate_against`).

A test set made of one corpus is meant to measure text a model never saw; when a model trains on another
prepared dataset, the same sentence may sit in both (the same message in another package: 226 of the 800
catalogs-heldout test tuples shared a sentence with the multidomain recipe's training split). This step drops
every dev and test tuple that shares a (language, normalized sentence) with the training split of a dataset
named in `prepare.split.decontaminate_against`, and counts it under `contaminated_dev` / `contaminated_test`.

The other dataset's Parquet shards keep each sentence as the text the cleaning step left (`<lang>_text`,
normalized by its `prepare.normalize`), the text this job's dedup and split compare too, so the unit of
overlap is `split.sentence_ids`, as for the split's own decontamination of train. The two datasets must
therefore have been normalized alike; `open_trained_on` refuses otherwise. It runs on the driver before any
work: it opens each dataset, checks it and verifies its training shards (sha256 from its manifest); each
worker's `DropTrainedOnFn.setup` verifies them again before it reads them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Set
from typing import Any

import apache_beam as beam
import pyarrow as pa
from pydantic import ValidationError

from core.dataset import Dataset, DatasetError
from core.location import Location
from core.normalize import NormalizeConfig
from pipelines.config import PrepareConfig
from pipelines.counting import STATS, CountedParDo, Tally
from pipelines.errors import SourceError
from pipelines.split import sentence_ids

log = logging.getLogger(__name__)

HELD_OUT = ("dev", "test")
REASONS = {split: f"contaminated_{split}" for split in HELD_OUT}  # the drop reason, per split
INPUT_SOURCE = "decontaminate_against"  # the `source` of their shards' records in the manifest's inputs

Tuple = tuple[str, dict[str, str]]


def trained_on(sentences: dict[str, str], seen: Set[str]) -> list[str]:
    """The languages of a tuple's (normalized) `sentences` whose sentence is in `seen` (`training_index`):
    the tuple is contaminated when this is not empty. Only the same sentence in the same language counts."""
    return [lang for lang, sentence_id in zip(sentences, sentence_ids(sentences)) if sentence_id in seen]


def training_index(table: pa.Table, languages: Iterable[str]) -> frozenset[str]:
    """The `sentence_ids` of every sentence in `table`'s `<lang>_text` columns (a prepared split), for the
    languages it has among `languages`; absent sentences (null) are skipped."""
    ids: set[str] = set()
    for lang in languages:
        column = f"{lang}_text"
        if column in table.column_names:
            ids.update(sentence_ids({lang: text})[0] for text in table.column(column).to_pylist() if text is not None)
    return frozenset(ids)


def open_trained_on(config: PrepareConfig, data_dir: Location | str) -> list[Dataset]:
    """Each dataset of `prepare.split.decontaminate_against`, opened, checked and its training split verified.

    Raises SourceError for one that is the dataset being prepared, holds another fingerprint than the pinned
    one, shares no language with this one or was normalized otherwise; DatasetError (naming the key) for one
    that is missing or damaged.
    """
    preparing = Location.of(data_dir)
    out = []
    for i, entry in enumerate(config.split.decontaminate_against):
        key = f"prepare.split.decontaminate_against[{i}]"
        location = Location.of(entry.dataset)  # workers may run elsewhere: the same location from anywhere
        if location == preparing:
            raise SourceError(f"{key}: {entry.dataset} is the dataset being prepared; name another dataset")
        try:
            data = Dataset.open(location).verify(["train"], spm=False)
        except DatasetError as exc:
            raise DatasetError(f"{key}: {exc}") from None
        if entry.fingerprint is not None and data.fingerprint != entry.fingerprint:
            raise SourceError(
                f"{key}: {entry.dataset} holds the dataset {data.fingerprint}, not the pinned "
                f"{entry.fingerprint}; pin the new one or prepare the pinned one again"
            )
        if not set(data.languages) & set(config.languages):
            raise SourceError(
                f"{key}: {entry.dataset} holds {data.languages}, none of this dataset's "
                f"{config.languages}: no sentence could be shared; name another dataset"
            )
        _check_normalized_alike(config.normalize, data, f"{key}: {entry.dataset}")
        out.append(data)
    return out


def _check_normalized_alike(ours: NormalizeConfig, data: Dataset, what: str) -> None:
    """SourceError when `data` was normalized otherwise than `ours` (its sentences would not compare)."""
    recorded = data.manifest.config.get("prepare", {}).get("normalize")
    if recorded is None:
        log.warning(
            "%s records no prepare.normalize: its sentences are taken as normalized as this dataset's (%s)",
            what,
            ours.model_dump(mode="json"),
        )
        return
    try:
        theirs = NormalizeConfig.model_validate(recorded)
    except ValidationError:
        theirs = None
    if theirs != ours:
        raise SourceError(
            f"{what} was normalized with prepare.normalize {recorded}, this dataset with "
            f"{ours.model_dump(mode='json')}: their sentences do not compare; prepare both with "
            "the same prepare.normalize"
        )


def input_records(datasets: list[Dataset]) -> list[dict[str, str | int | None]]:
    """The training shards read, as the manifest's input records (`InputRecord`): in the fingerprint, so that
    this dataset is made again when one of them changes."""
    return [
        {
            "source": INPUT_SOURCE,
            "path": Location.of(data.location).join(f.path).text,
            "sha256": f.sha256,
            "bytes": f.bytes,
        }
        for data in datasets
        for f in data.manifest.splits["train"].files
    ]


class DropTrainedOnFn(beam.DoFn):
    """(split, tuple) of dev or test -> the same, unless the tuple shares a sentence with the training split of
    one of `datasets` (then counted under its split's reason)."""

    def __init__(self, datasets: list[Dataset], languages: list[str]) -> None:
        self.datasets, self.languages = datasets, languages

    def setup(self) -> None:
        seen: set[str] = set()
        for expected in self.datasets:
            data = Dataset.open(expected.location)
            if data.fingerprint != expected.fingerprint:  # prepared again since the driver checked it
                raise DatasetError(
                    f"{expected.location}: its dataset changed during this preparation "
                    f"({expected.fingerprint[:12]} -> {data.fingerprint[:12]}); run it again"
                )
            common = [lang for lang in self.languages if lang in data.languages]
            table = data.verify(["train"], spm=False).read("train", [f"{lang}_text" for lang in common])
            seen |= training_index(table, common)
        self.seen = frozenset(seen)
        log.info(
            "decontaminating dev and test against %d training sentences of %d datasets",
            len(self.seen),
            len(self.datasets),
        )

    def process(self, element: tuple[str, Tuple]) -> Iterator[Any]:
        split, (key, sentences) = element
        if trained_on(sentences, self.seen):
            tally = Tally()
            tally.drop_tuple(REASONS[split], sentences)
            yield from tally.flush()
        else:
            yield element


class DropTrainedOn(beam.PTransform):
    """{'dev': tuples, 'test': tuples} -> {'dev', 'test', 'stats'}: the tuples that share no sentence with the
    training split of any of `datasets`, and the counts of the others.

    One DoFn sees both splits (tagged), so that a worker builds the index of their sentences once.
    """

    def __init__(self, datasets: list[Dataset], languages: list[str]) -> None:
        super().__init__()
        self.datasets, self.languages = datasets, languages

    def expand(self, splits: dict[str, beam.PCollection]) -> dict[str, beam.PCollection]:
        tagged = [splits[s] | f"Tag{s.title()}" >> beam.Map(lambda t, s=s: (s, t)) for s in HELD_OUT]
        kept = (
            tagged
            | "HeldOut" >> beam.Flatten()
            | "DropContaminated" >> CountedParDo(DropTrainedOnFn(self.datasets, self.languages), main="kept")
        )
        # filters, not a Partition: see pipelines.counting on multi-output ParDos
        out = {
            s: kept["kept"] | f"Kept{s.title()}" >> beam.FlatMap(lambda e, s=s: [e[1]] if e[0] == s else [])
            for s in HELD_OUT
        }
        return {**out, STATS: kept[STATS]}
