"""BPE training on a language-balanced sample, encoding, and the Parquet shard writes."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import sentencepiece as spm

from core import dataset, dataset_writer
from core.location import Location
from pipelines import tokenizer
from pipelines.config import SpmConfig
from pipelines.counting import STATS, CountedParDo, Tally
from pipelines.joins import JoinSingleton
from pipelines.tokenizer import unit_hash

log = logging.getLogger(__name__)

Tuple = tuple[str, dict[str, str]]
SAMPLE_STAT = "spm/sample_sentences"


def _sample(t: Tuple, rates: dict[str, float]) -> list[tuple[str, list[str]]]:
    """[(key, the copies of the tuple's sentences drawn into the BPE sample)], or [] if none was."""
    key, sentences = t
    texts = [text for lang, text in sorted(sentences.items()) for _ in range(tokenizer.copies(rates[lang], key, lang))]
    return [(key, texts)] if texts else []


def _sample_group(group: tuple[dict[str, float], list[Tuple]]) -> list[tuple[str, list[str]]]:
    """(rates, tuples) -> the sample drawn from those tuples."""
    rates, tuples = group
    return [drawn for t in tuples for drawn in _sample(t, rates)]


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


class TrainFn(beam.DoFn):
    """The gathered sample -> the serialized BPE model, and the count of sampled sentences (a `Stat`)."""

    def __init__(self, config: SpmConfig) -> None:
        self.config = config

    def process(self, samples: list[tuple[str, list[str]]]) -> Iterator[Any]:
        started = time.monotonic()
        samples.sort(key=lambda s: s[0])  # by tuple key: the same order, the same model, on any runner
        sample = [text for _, texts in samples for text in texts]
        proto = tokenizer.train_bpe(sample, self.config)
        size = spm.SentencePieceProcessor(model_proto=proto).get_piece_size()
        log.info(
            "trained BPE on %d sampled sentences in %.1fs: %d pieces", len(sample), time.monotonic() - started, size
        )
        if size < self.config.vocab_size:
            log.warning(
                "the BPE vocabulary has %d pieces, fewer than vocab_size=%d: the sample is small",
                size,
                self.config.vocab_size,
            )
        tally = Tally()
        tally.add(SAMPLE_STAT, len(sample))
        yield from tally.flush()
        yield proto


class TrainBpe(beam.PTransform):
    """{'train': tuples, 'pool': tuples} -> {'model': the serialized BPE model, 'stats': ...}.

    The sampling rates come from the sentence counts of `pool`, the
    deduplicated tuples that the split draws from (a few per cent more than
    train holds). They are known when decontamination runs, so the sampling
    happens in the same pass over the tuples instead of a second one (on Dask,
    a shuffle join brings them: see `pipelines.joins`).
    """

    def __init__(self, config: SpmConfig) -> None:
        super().__init__()
        self.config = config

    def expand(self, inputs: dict[str, beam.PCollection]) -> Any:
        cfg = self.config
        rates = (
            inputs["pool"]
            | "CountPerLanguage" >> beam.CombineGlobally(CountLanguagesFn()).without_defaults()
            | "SamplingRates" >> beam.Map(tokenizer.sampling_rates, cfg)
        )
        trained = (
            {"elements": inputs["train"], "value": rates}
            | "JoinRates" >> JoinSingleton(key=lambda t: t[0])
            | "SampleSentences" >> beam.FlatMap(_sample_group)
            # without_defaults: a global combine with a default re-reads its whole
            # output as a side input (the sample: tens of MB, deep-sized by Beam's cache)
            | "GatherSample" >> beam.CombineGlobally(beam.combiners.ToListCombineFn()).without_defaults()
            | "TrainModel" >> CountedParDo(TrainFn(cfg), main="model")
        )
        return {"model": trained["model"], STATS: trained[STATS]}


class WriteShardFn(beam.DoFn):
    """(shard, {'tuples': its tuples, 'model': [the BPE model]}) -> BPE-encoded rows in one Parquet
    file; yields what it wrote as `Stat`s.

    Encoding here, after the shuffle, keeps token ids out of it, and lets
    sentencepiece encode a whole shard in one (multi-threaded) call.
    """

    def __init__(self, root: Location, languages: list[str], shards: dict[str, int]) -> None:
        self.root, self.languages, self.shards = root, languages, shards

    def setup(self) -> None:
        self._proto: bytes | None = None

    def process(self, element: tuple[tuple[str, int], dict[str, Iterable[Any]]]) -> Iterator[Any]:
        (split, shard), joined = element
        tuples, models = list(joined["tuples"]), list(joined["model"])
        if tuples and models:
            # otherwise no row fell in this shard (the driver writes it empty), or no training sentence was left
            # to learn a BPE model from (the driver stops with the drop counts: `accounting.check_not_empty`)
            yield from self._write(split, shard, tuples, models)

    def _write(self, split: str, shard: int, tuples: list, models: list[bytes]) -> Iterator[Any]:
        tally = Tally()
        (model,) = models
        if model != self._proto:
            self.sp = spm.SentencePieceProcessor(model_proto=model)
            self._proto = model
        ids = iter(self.sp.encode([text for _, sentences in tuples for text in sentences.values()]))
        rows = []
        for key, sentences in tuples:
            row: dict[str, str | list[int] | int] = {"key": key}
            for lang, text in sentences.items():
                tokens = next(ids)
                row[f"{lang}_text"], row[f"{lang}_ids"], row[f"{lang}_len"] = text, tokens, len(tokens)
                tally.add(f"sentences/{lang}/out/{split}")
            rows.append(row)
            tally.add(f"sources/{key.split(':', 1)[0]}/out/{split}")  # every key starts with its source's name
        tally.add(f"tuples/out/{split}", len(rows))
        name = dataset_writer.shard_name(split, shard, self.shards[split])
        dataset_writer.write_shard(self.root.join(name).text, rows, self.languages)
        log.debug("wrote %s: %d rows", name, len(rows))  # one line per shard: for -v
        yield from tally.flush()


def _write_model(proto: bytes, root: Location) -> list[Any]:
    """Write spm.model and spm.vocab under `root`; no output (it joins the stats, to be waited for)."""
    root.join(dataset.SPM_MODEL).write_bytes(proto)
    root.join(dataset.SPM_VOCAB).write_bytes(tokenizer.vocab_tsv(proto).encode("utf-8"))
    return []


class EncodeAndWrite(beam.PTransform):
    """{split: tuples, 'pool': deduplicated tuples} -> BPE model and Parquet shards under `root`; the stats."""

    def __init__(self, config: SpmConfig, languages: list[str], shards: dict[str, int], root: Location | str):
        super().__init__()
        self.config, self.languages, self.shards, self.root = config, languages, shards, Location.of(root)

    def expand(self, inputs: dict[str, beam.PCollection]) -> Any:
        splits = {s: inputs[s] for s in dataset.SPLITS}
        trained = {"train": inputs["train"], "pool": inputs["pool"]} | "TrainBpe" >> TrainBpe(self.config)
        model = trained["model"]
        # the write's (empty) output joins the stats: a runner that computes only what
        # the job's last step depends on (Beam 2.77's DaskRunner) still writes the model
        model_written = model | "WriteModel" >> beam.FlatMap(_write_model, self.root)
        keyed = [
            pcoll
            | f"Shard{split.title()}"
            >> beam.Map(lambda t, s=split: ((s, int(unit_hash("shard", t[0]) * self.shards[s])), t))
            for split, pcoll in splits.items()
        ]
        # the model joins each shard's tuples (a copy per shard) in the shard grouping, the shuffle
        # that was needed anyway: no side input on any runner (see pipelines.joins)
        every_shard = [(s, i) for s, n in self.shards.items() for i in range(n)]
        written = (
            {
                "tuples": keyed | "AllSplits" >> beam.Flatten(),
                "model": model | "ModelPerShard" >> beam.FlatMap(lambda m: [(k, m) for k in every_shard]),
            }
            | "GroupByShard" >> beam.CoGroupByKey()
            | "EncodeAndWriteShards" >> beam.ParDo(WriteShardFn(self.root, self.languages, self.shards))
            | "ShardStats" >> beam.Map(lambda stat: (stat.name, stat.n))
        )
        return (written, trained[STATS], model_written) | "EncodeStats" >> beam.Flatten()
