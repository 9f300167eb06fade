"""BPE training on a language-balanced sample, encoding, and the Parquet shard writes."""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Iterable, Iterator

import apache_beam as beam
import sentencepiece as spm

from pipelines import dataset, tokenizer
from pipelines.config import SpmConfig
from pipelines.counting import STATS, Tally
from pipelines.tokenizer import unit_hash

log = logging.getLogger(__name__)

Tuple = tuple[str, dict[str, str]]


def _sample(t: Tuple, rates: dict[str, float]) -> list[tuple[str, str]]:
    """The copies of one tuple's sentences drawn into the BPE sample, each with its sort key."""
    key, sentences = t
    return [
        (f"{key}\x1f{lang}\x1f{copy}", text)
        for lang, text in sentences.items()
        for copy in range(tokenizer.copies(rates[lang], key, lang))
    ]


class CountLanguagesFn(beam.CombineFn):
    """Sentences per language over all tuples (a combiner: one partial count per bundle)."""

    def create_accumulator(self) -> dict[str, int]:
        return {}

    def add_input(self, acc: dict[str, int], t: Tuple) -> dict[str, int]:
        for lang in t[1]:
            acc[lang] = acc.get(lang, 0) + 1
        return acc

    def merge_accumulators(self, accs: Iterable[dict[str, int]]) -> dict[str, int]:
        out: dict[str, int] = {}
        for acc in accs:
            for lang, n in acc.items():
                out[lang] = out.get(lang, 0) + n
        return out

    def extract_output(self, acc: dict[str, int]) -> dict[str, int]:
        return acc


def _train(samples: list[list[tuple[str, str]]], config: SpmConfig) -> bytes:
    started = time.monotonic()
    sample = sorted(s for part in samples for s in part)  # a fixed order: the same model every time
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
            | "CountPerLanguage" >> beam.CombineGlobally(CountLanguagesFn())
            | "SamplingRates" >> beam.Map(tokenizer.sampling_rates, cfg)
        )
        return (
            train
            | "SampleSentences" >> beam.Map(_sample, rates)
            | "NonEmpty" >> beam.Filter(bool)
            | "GatherSample" >> beam.combiners.ToList()
            | "TrainModel" >> beam.Map(_train, cfg)
        )


class WriteShardFn(beam.DoFn):
    """All tuples of one shard -> BPE-encoded rows in one Parquet file; counts what each split gets.

    Encoding here, after the shuffle, keeps token ids out of it, and lets
    sentencepiece encode a whole shard in one (multi-threaded) call.
    """

    def __init__(self, root: str, languages: list[str], shards: dict[str, int]) -> None:
        self.root, self.languages, self.shards = root, languages, shards

    def setup(self) -> None:
        self._proto: bytes | None = None

    def start_bundle(self) -> None:
        self.tally = Tally()

    def process(self, element: tuple[tuple[str, int], Iterable[Tuple]], model: bytes) -> Iterator[Any]:
        if model is not self._proto:
            self.sp = spm.SentencePieceProcessor(model_proto=model)
            self._proto = model
        (split, shard), tuples = element
        tuples = list(tuples)
        ids = iter(self.sp.encode([text for _, sentences in tuples for text in sentences.values()]))
        rows = []
        for key, sentences in tuples:
            row: dict[str, Any] = {"key": key}
            for lang, text in sentences.items():
                tokens = next(ids)
                row[f"{lang}_text"], row[f"{lang}_ids"], row[f"{lang}_len"] = text, tokens, len(tokens)
                self.tally.add(f"sentences/{lang}/out/{split}")
            rows.append(row)
        self.tally.add(f"tuples/out/{split}", len(rows))
        name = dataset.shard_name(split, shard, self.shards[split])
        dataset.write_shard(os.path.join(self.root, name), rows, self.languages)
        log.info("wrote %s: %d rows", name, len(rows))
        yield name

    def finish_bundle(self) -> Iterator[Any]:
        yield from self.tally.flush()


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
        keyed = [
            pcoll | f"Shard{split.title()}" >> beam.Map(
                lambda t, s=split: ((s, int(unit_hash("shard", t[0]) * self.shards[s])), t))
            for split, pcoll in splits.items()
        ]
        written = (
            keyed
            | "AllSplits" >> beam.Flatten()
            | "GroupByShard" >> beam.GroupByKey()
            | "EncodeAndWriteShards" >> beam.ParDo(
                WriteShardFn(self.root, self.languages, self.shards), beam.pvalue.AsSingleton(model)
            ).with_outputs(STATS, main="files")
        )
        return written[STATS]
