"""The corpus-preparation Beam job: read -> clean -> dedup -> split -> BPE -> Parquet shards.

Each step is a composite transform named for its role. Steps count what they
drop by reason: as Beam `Metrics` (visible in any runner's UI) and as a
`stats` side output that the driver sums into the manifest, where

    tuples read = tuples written + tuples dropped (by reason), and per language
    sentences read = sentences written + sentences dropped (by reason).
"""
from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import dataset, sources
from pipelines.clean import CleanTupleFn
from pipelines.config import PrepareConfig, dump_yaml
from pipelines.counting import STATS
from pipelines.dedup import DedupTuples
from pipelines.encode import SAMPLE_STAT, EncodeAndWrite
from pipelines.sources import ReadTupleFn
from pipelines.split import SplitTuples, check_held_out

log = logging.getLogger(__name__)

STATS_FILE = "stats.json"
DEFAULT_RUNNER = "FnApiRunner"


def pipeline_options(beam_args: list[str], *, workers: int = 1) -> PipelineOptions:
    """Beam options: any runner's flags pass through; Beam's in-process runner otherwise.

    The in-process runner is named explicitly: `DirectRunner` would first try to
    fetch the Prism runner binary. `workers > 1` runs it in that many processes
    (multi_processing; multi_threading was seen losing rows).
    """
    options = PipelineOptions(beam_args)
    if not any(a == "--runner" or a.startswith("--runner=") for a in beam_args):
        extra = {"runner": DEFAULT_RUNNER}
        if workers > 1:
            extra.update(direct_num_workers=workers, direct_running_mode="multi_processing")
        options = PipelineOptions(beam_args, **extra)
    return options


def _write_stats(stats: dict[str, int], root: str) -> None:
    with open(Path(root) / STATS_FILE, "w") as handle:
        json.dump(stats, handle, sort_keys=True)


class PrepareCorpus(beam.PTransform):
    """Read tasks -> cleaned, deduplicated, split, BPE-encoded Parquet shards under `root`."""

    def __init__(self, config: PrepareConfig, root: str) -> None:
        super().__init__()
        self.config = config
        self.root = root

    def expand(self, tasks: beam.PCollection) -> beam.PCollection:
        cfg = self.config
        shards = {"train": cfg.output.train_shards, "dev": cfg.output.heldout_shards,
                  "test": cfg.output.heldout_shards}
        read = (
            tasks
            | "DistributeTasks" >> beam.Reshuffle()
            | "ReadTuples" >> beam.ParDo(ReadTupleFn()).with_outputs(STATS, main="tuples")
        )
        clean = read.tuples | "CleanTuples" >> beam.ParDo(CleanTupleFn(cfg)).with_outputs(
            STATS, main="tuples")
        unique = clean.tuples | "Deduplicate" >> DedupTuples(cfg.dedup)
        splits = unique["tuples"] | "SplitTuples" >> SplitTuples(cfg.split, cfg.languages)
        to_encode = {**{s: splits[s] for s in dataset.SPLITS}, "pool": unique["tuples"]}
        encoded = to_encode | "EncodeAndWrite" >> EncodeAndWrite(cfg.spm, cfg.languages, shards, self.root)
        return (
            (read[STATS], clean[STATS], unique[STATS], splits[STATS], encoded)
            | "AllStats" >> beam.Flatten()
            | "SumStats" >> beam.CombinePerKey(sum)
            | "StatsAsDict" >> beam.combiners.ToDict()
            | "WriteStats" >> beam.Map(_write_stats, self.root)
        )


@dataclass
class PrepareResult:
    manifest: dict[str, Any]
    skipped: bool  # the dataset was already up to date
    seconds: float


def fingerprint(config: PrepareConfig, inputs: list[dict]) -> str:
    """Content fingerprint of a dataset: format, stage config and input hashes."""
    return dataset.fingerprint({"format": dataset.FORMAT, "config": config.model_dump(mode="json"), "inputs": inputs})


def run_prepare(
    config: PrepareConfig,
    data_dir: str | Path,
    *,
    options: PipelineOptions,
    resolved_config: dict[str, Any] | None = None,
    force: bool = False,
) -> PrepareResult:
    """Run the Beam job unless `data_dir` already holds this dataset; publish it atomically.

    Raises SourceError (bad input, before any work), HeldOutError (splits too
    large), or RuntimeError if the counts do not add up.
    """
    started = time.monotonic()
    data_dir = Path(data_dir)
    plan = sources.plan_reads(config)
    held_out = config.split.held_out_size()
    if held_out and held_out >= plan.records:
        raise sources.SourceError(
            f"prepare.split: dev_size + test_size = {held_out} but the sources hold only "
            f"{plan.records} records; lower them or use dev_fraction/test_fraction"
        )
    print_ = fingerprint(config, plan.fingerprints)
    if not force and (data_dir / dataset.MANIFEST).is_file():
        old = dataset.load_manifest(data_dir)
        if old.get("fingerprint") == print_:
            log.info("%s is up to date (fingerprint %s): nothing to do", data_dir, print_[:12])
            return PrepareResult(old, skipped=True, seconds=time.monotonic() - started)
    staging = dataset.staging_dir(data_dir, print_)
    if staging.exists():
        shutil.rmtree(staging)  # left by a crashed run of the same config
    staging.mkdir(parents=True)
    log.info("preparing %d records from %d sources in %d read tasks -> %s",
             plan.records, len(config.sources), len(plan.tasks), data_dir)
    with beam.Pipeline(options=options) as pipeline:
        _ = (
            pipeline
            | "CreateReadTasks" >> beam.Create(plan.tasks)
            | "PrepareCorpus" >> PrepareCorpus(config, str(staging))
        )
    stats = json.loads((staging / STATS_FILE).read_text())
    (staging / STATS_FILE).unlink()
    manifest = _manifest(config, staging, stats, plan, print_, resolved_config)
    if resolved_config is not None:
        (staging / dataset.CONFIG_FILE).write_text(dump_yaml(resolved_config), encoding="utf-8")
    dataset.publish(staging, data_dir, manifest)
    seconds = time.monotonic() - started
    log.info("published %s in %.1fs", data_dir, seconds)
    return PrepareResult(manifest, skipped=False, seconds=seconds)


def _shard_files(staging: Path, split: str, count: int, languages: list[str]) -> list[dict]:
    """Every shard of a split (an empty one written where no row fell), with its checksum."""
    files = []
    for i in range(count):
        name = dataset.shard_name(split, i, count)
        path = staging / name
        if not path.exists():
            dataset.write_shard(str(path), [], languages)
        files.append({"path": name, "rows": pq.ParquetFile(path).metadata.num_rows,
                      "bytes": path.stat().st_size, "sha256": dataset.file_sha256(path)})
    return files


def count_table(stats: dict[str, int], languages: list[str]) -> dict[str, Any]:
    """Turn flat stats names into {tuples: {...}, sentences: {lang: {...}}, normalized: {...}}."""
    def block(prefix: str) -> dict[str, Any]:
        out = {"in": stats.get(f"{prefix}/in", 0),
               "out": {s: stats.get(f"{prefix}/out/{s}", 0) for s in dataset.SPLITS},
               "dropped": {}}
        for name, n in sorted(stats.items()):
            if name.startswith(f"{prefix}/dropped/"):
                out["dropped"][name.rsplit("/", 1)[1]] = n
        return out

    normalized: dict[str, dict[str, int]] = {}
    for name, n in sorted(stats.items()):
        if name.startswith("normalized/"):
            _, lang, pattern = name.split("/")
            normalized.setdefault(lang, {})[pattern] = n
    return {"tuples": block("tuples"),
            "sentences": {lang: block(f"sentences/{lang}") for lang in languages},
            "normalized": normalized}


def check_accounting(counts: dict[str, Any]) -> None:
    """Raise RuntimeError unless everything read was written or dropped under a reason."""
    blocks = {"tuples": counts["tuples"], **{f"sentences/{k}": v for k, v in counts["sentences"].items()}}
    for name, b in blocks.items():
        accounted = sum(b["out"].values()) + sum(b["dropped"].values())
        if accounted != b["in"]:
            raise RuntimeError(f"{name}: {b['in']} read but {accounted} written or dropped: records lost")


def _manifest(config: PrepareConfig, staging: Path, stats: dict[str, int], plan: sources.SourcePlan,
              print_: str, resolved: dict[str, Any] | None) -> dict[str, Any]:
    import sentencepiece as spm

    counts = count_table(stats, config.languages)
    check_accounting(counts)
    check_held_out(config.split, counts["tuples"]["out"])
    shards = {"train": config.output.train_shards, "dev": config.output.heldout_shards,
              "test": config.output.heldout_shards}
    splits = {}
    for split, count in shards.items():
        files = _shard_files(staging, split, count, config.languages)
        splits[split] = {"tuples": sum(f["rows"] for f in files), "files": files}
        if splits[split]["tuples"] != counts["tuples"]["out"][split]:
            raise RuntimeError(f"{split}: shards hold {splits[split]['tuples']} rows, "
                               f"{counts['tuples']['out'][split]} were encoded")
    sp = spm.SentencePieceProcessor(model_file=str(staging / dataset.SPM_MODEL))
    return {
        "format": dataset.FORMAT,
        "fingerprint": print_,
        "languages": config.languages,
        "splits": splits,
        "schema": dataset.schema(config.languages).to_string(show_schema_metadata=False).splitlines(),
        "spm": {"model": dataset.SPM_MODEL, "vocab": dataset.SPM_VOCAB, "model_type": "bpe",
                "vocab_size": sp.get_piece_size(), "pad_id": dataset.PAD_ID, "unk_id": dataset.UNK_ID,
                "bos_id": dataset.BOS_ID, "eos_id": dataset.EOS_ID,
                "sha256": dataset.file_sha256(staging / dataset.SPM_MODEL),
                "sample_sentences": stats.get(SAMPLE_STAT, 0)},
        "counts": counts,
        "inputs": plan.fingerprints,
        "config": resolved if resolved is not None else {"prepare": config.model_dump(mode="json")},
    }


def summary(result: PrepareResult) -> str:
    """A few lines for people: tuples in and out, drops by reason, time."""
    m = result.manifest
    t = m["counts"]["tuples"]
    lines = [
        f"tuples read {t['in']:,}; written " + ", ".join(f"{s} {n:,}" for s, n in t["out"].items()),
        "tuples dropped: " + (", ".join(f"{r} {n:,}" for r, n in t["dropped"].items()) or "none"),
    ]
    for lang, b in m["counts"]["sentences"].items():
        drops = ", ".join(f"{r} {n:,}" for r, n in b["dropped"].items()) or "none"
        lines.append(f"  {lang}: read {b['in']:,}, written {sum(b['out'].values()):,}; dropped: {drops}")
    lines.append(f"vocabulary {m['spm']['vocab_size']:,} BPE pieces; "
                 + ("already up to date" if result.skipped else f"done in {result.seconds:.1f}s"))
    return "\n".join(lines)
