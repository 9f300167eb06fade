"""BPE training on a language-balanced sample, encoding, and the Parquet shard writes."""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Iterator

import apache_beam as beam
import sentencepiece as spm

from pipelines import dataset, tokenizer
from pipelines.config import SpmConfig
from pipelines.counting import STATS, Tally
from pipelines.tokenizer import unit_hash

log = logging.getLogger(__name__)

Tuple = tuple[str, dict[str, str]]


def _sample(t: Tuple, rates: dict[str, float]) -> Iterator[tuple[float, str]]:
    key, sentences = t
    for lang, text in sentences.items():
        for copy in range(tokenizer.copies(rates[lang], key, lang)):
            yield unit_hash("order", key, lang, copy), text


def _train(sample: list[tuple[float, str]], config: SpmConfig) -> bytes:
    started = time.monotonic()
    sample.sort()  # a fixed order: the same sample always gives the same model
    proto = tokenizer.train_bpe((text for _, text in sample), config)
    size = spm.SentencePieceProcessor(model_proto=proto).get_piece_size()
    log.info("trained BPE on %d sampled sentences in %.1fs: %d pieces",
             len(sample), time.monotonic() - started, size)
    if size < config.vocab_size:
        log.warning("the BPE vocabulary has %d pieces, fewer than vocab_size=%d: the sample is small",
                    size, config.vocab_size)
    return proto


class TrainBpe(beam.PTransform):
    """Training tuples -> the serialized sentencepiece BPE model (a one-element PCollection)."""

    def __init__(self, config: SpmConfig) -> None:
        super().__init__()
        self.config = config

    def expand(self, train: beam.PCollection) -> beam.PCollection:
        cfg = self.config
        rates = beam.pvalue.AsSingleton(
            train
            | "Languages" >> beam.FlatMap(lambda t: list(t[1]))
            | "CountPerLanguage" >> beam.combiners.Count.PerElement()
            | "CountsAsDict" >> beam.combiners.ToDict()
            | "SamplingRates" >> beam.Map(tokenizer.sampling_rates, cfg)
        )
        return (
            train
            | "SampleSentences" >> beam.FlatMap(_sample, rates)
            | "GatherSample" >> beam.combiners.ToList()
            | "TrainModel" >> beam.Map(_train, cfg)
        )


class EncodeFn(beam.DoFn):
    """(split, tuple) -> a Parquet row keyed by its shard; counts what each split receives."""

    def __init__(self, languages: list[str], shards: dict[str, int]) -> None:
        self.languages = languages
        self.shards = shards

    def setup(self) -> None:
        self._proto: bytes | None = None

    def start_bundle(self) -> None:
        self.tally = Tally()

    def process(self, element: tuple[str, Tuple], model: bytes) -> Iterator[Any]:
        if model is not self._proto:
            self.sp = spm.SentencePieceProcessor(model_proto=model)
            self._proto = model
        split, (key, sentences) = element
        langs = list(sentences)
        ids = self.sp.encode([sentences[lang] for lang in langs])
        row: dict[str, Any] = {"key": key}
        for lang, tokens in zip(langs, ids):
            row[f"{lang}_text"] = sentences[lang]
            row[f"{lang}_ids"] = tokens
            row[f"{lang}_len"] = len(tokens)
            self.tally.add(f"sentences/{lang}/out/{split}")
        self.tally.add(f"tuples/out/{split}")
        shard = int(unit_hash("shard", key) * self.shards[split])
        yield (split, shard), row

    def finish_bundle(self) -> Iterator[Any]:
        yield from self.tally.flush()


def _write_shard(element: tuple[tuple[str, int], Any], root: str, languages: list[str],
                 shards: dict[str, int]) -> str:
    (split, shard), rows = element
    name = dataset.shard_name(split, shard, shards[split])
    record = dataset.write_shard(os.path.join(root, name), list(rows), languages)
    log.info("wrote %s: %d rows", name, record["rows"])
    return name


def _write_model(proto: bytes, root: str) -> None:
    with open(os.path.join(root, dataset.SPM_MODEL), "wb") as handle:
        handle.write(proto)
    with open(os.path.join(root, dataset.SPM_VOCAB), "w", encoding="utf-8") as handle:
        handle.write(tokenizer.vocab_tsv(proto))


class EncodeAndWrite(beam.PTransform):
    """{split: tuples} -> BPE model and Parquet shards under `root`; returns the stats."""

    def __init__(self, config: SpmConfig, languages: list[str], shards: dict[str, int], root: str):
        super().__init__()
        self.config, self.languages, self.shards, self.root = config, languages, shards, root

    def expand(self, splits: dict[str, beam.PCollection]) -> Any:
        model = splits["train"] | "TrainBpe" >> TrainBpe(self.config)
        _ = model | "WriteModel" >> beam.Map(_write_model, self.root)
        labelled = [
            pcoll | f"Label{split.title()}" >> beam.Map(lambda t, s=split: (s, t))
            for split, pcoll in splits.items()
        ]
        rows = (
            labelled
            | "AllSplits" >> beam.Flatten()
            | "Encode" >> beam.ParDo(
                EncodeFn(self.languages, self.shards), beam.pvalue.AsSingleton(model)
            ).with_outputs(STATS, main="rows")
        )
        _ = (
            rows.rows
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShards" >> beam.Map(_write_shard, self.root, self.languages, self.shards)
        )
        return rows[STATS]
