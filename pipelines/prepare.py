"""The corpus-preparation Beam job: read -> clean -> dedup -> split -> BPE -> Parquet shards.

Each step is a composite transform named for its role. Steps count what they
drop by reason: as Beam `Metrics` (visible in any runner's UI) and as `stats`
elements (`pipelines.counting`) that the driver sums into the manifest, where

    tuples read = tuples written + tuples dropped (by reason), and per language
    sentences read = sentences written + sentences dropped (by reason).

The job ends in one step that depends on every other (writing the summed
stats): Beam 2.77's DaskRunner runs only what the last step depends on. The
dataset is written under a staging location and committed when complete
(`core.stage`, `core.output`): a local directory, or a URI (s3://, gs://, hdfs://).
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from core import dataset, dataset_writer, stage
from core.location import Location
from core.output import Staging
from core.schema import dump_yaml
from pipelines import sources, staging
from pipelines.clean import SCRIPTS, base_language
from pipelines.config import PrepareConfig
from pipelines.counting import STATS, CountedParDo
from pipelines.decontaminate import DropTrainedOn, input_records, open_trained_on
from pipelines.dedup import DedupTuples
from pipelines.encode import EncodeAndWrite
from pipelines.manifest import build_manifest
from pipelines.runners import for_cluster, release
from pipelines.split import SplitTuples
from pipelines.transforms import CleanTupleFn, ReadTupleFn

log = logging.getLogger(__name__)

STATS_FILE = "stats.json"


def _write_stats(stats: dict[str, int], root: Location) -> None:
    root.join(STATS_FILE).write_bytes(json.dumps(stats, sort_keys=True).encode())


class PrepareCorpus(beam.PTransform):
    """Read tasks -> cleaned, deduplicated, split, BPE-encoded Parquet shards under `root`.

    `trained_on`: the datasets of `prepare.split.decontaminate_against`, opened (`open_trained_on`).
    """

    def __init__(self, config: PrepareConfig, root: Location, trained_on: list[dataset.Dataset] | None = None) -> None:
        super().__init__()
        self.config = config
        self.root = root
        self.trained_on = trained_on or []
        assert len(self.trained_on) == len(config.split.decontaminate_against), "open_trained_on(config) first"

    def expand(self, tasks: beam.PCollection) -> beam.PCollection:
        cfg = self.config
        shards = {"train": cfg.output.train_shards, "dev": cfg.output.heldout_shards, "test": cfg.output.heldout_shards}
        read = tasks | "DistributeTasks" >> beam.Reshuffle() | "ReadTuples" >> CountedParDo(ReadTupleFn())
        clean = read["tuples"] | "CleanTuples" >> CountedParDo(CleanTupleFn(cfg))
        unique = clean["tuples"] | "Deduplicate" >> DedupTuples(cfg.dedup)
        splits = unique["tuples"] | "SplitTuples" >> SplitTuples(cfg.split, cfg.languages)
        stats = [read[STATS], clean[STATS], unique[STATS], splits[STATS]]
        if self.trained_on:
            held_out = {"dev": splits["dev"], "test": splits["test"]} | "DecontaminateHeldOut" >> DropTrainedOn(
                self.trained_on, cfg.languages
            )
            splits = {**splits, "dev": held_out["dev"], "test": held_out["test"]}
            stats.append(held_out[STATS])
        to_encode = {**{s: splits[s] for s in dataset.SPLITS}, "pool": unique["tuples"]}
        encoded = to_encode | "EncodeAndWrite" >> EncodeAndWrite(cfg.spm, cfg.languages, shards, self.root)
        return (
            (*stats, encoded)
            | "AllStats" >> beam.Flatten()
            | "SumStats" >> beam.CombinePerKey(sum)
            # without_defaults: a default would come from a side input (see pipelines.joins)
            | "StatsAsDict" >> beam.CombineGlobally(beam.combiners.ToDictCombineFn()).without_defaults()
            | "WriteStats" >> beam.Map(_write_stats, self.root)
        )


@dataclass
class PrepareResult:
    manifest: dataset.DatasetManifest
    skipped: bool  # the dataset was already up to date
    seconds: float


def fingerprint(config: PrepareConfig, inputs: list[dict]) -> str:
    """Content fingerprint of a dataset: format, stage config and input hashes (with the training shards of
    `split.decontaminate_against`'s datasets: `decontaminate.input_records`)."""
    dumped = config.model_dump(mode="json")
    if not config.split.decontaminate_against:
        del dumped["split"]["decontaminate_against"]  # unset, it leaves every earlier dataset's fingerprint as it was
    return dataset.fingerprint({"format": dataset.FORMAT, "config": dumped, "inputs": inputs})


def run_prepare(
    config: PrepareConfig,
    data_dir: str | Path,
    *,
    options: PipelineOptions,
    resolved_config: dict[str, Any] | None = None,
    force: bool = False,
) -> PrepareResult:
    """Run the Beam job unless `data_dir` already holds this dataset; publish it atomically.

    `data_dir` is a local directory or a URI (s3://, gs://, hdfs://, file://;
    see `pipelines.staging` for how each is committed and what is untested).
    Raises SourceError (bad input, before any work; EmptyDataError when nothing
    or a language would be left; a `split.decontaminate_against` dataset that cannot be compared), DatasetError
    (such a dataset missing or damaged), HeldOutError (splits too large), RuntimeError
    if the counts do not add up, DatasetError if a staged file is missing at
    commit or the up-to-date dataset is damaged, StorageError for a URI no
    filesystem knows.
    """
    started = time.monotonic()
    where = Location.of(data_dir, "dataset_dir")
    warn_unchecked_scripts(config)
    plan = sources.plan_reads(config)
    held_out = config.split.held_out_size()
    if held_out and held_out >= plan.records:
        raise sources.SourceError(
            f"prepare.split: dev_size + test_size = {held_out} but the sources hold only "
            f"{plan.records} records; lower them or use dev_fraction/test_fraction"
        )
    trained_on = open_trained_on(config, where)  # verified: its shards' sha256 go into the fingerprint
    plan = sources.SourcePlan(plan.tasks, plan.fingerprints + input_records(trained_on), plan.records)
    print_ = fingerprint(config, plan.fingerprints)
    name = (resolved_config or {}).get("name")
    dataset_stage = stage.Stage(
        dataset_writer.folder(where),
        print_,
        read=lambda: dataset.load_manifest(where) if where.join(dataset.MANIFEST).exists() else None,
        fingerprint_of=lambda manifest: manifest.fingerprint,
        verify=lambda _: dataset.verify(where, dataset.SPLITS),  # up to date only if whole: names a bad file
        refuse=lambda current: staging.refuse_other_config(where, current, name, print_, force),
    )

    def work(staged: Staging) -> stage.Manifest[dataset.DatasetManifest]:
        _warn_unchecked_languages(config)
        with _interrupt_is_keyboard_interrupt():  # before the first line: a Ctrl+C after it stops the job
            log.info(
                "preparing %d records from %d sources in %d read tasks -> %s",
                plan.records,
                len(config.sources),
                len(plan.tasks),
                where,
            )
            stats = _run_job(config, plan, staged.root, options, trained_on)
        manifest = build_manifest(config, staged, stats, plan, print_, resolved_config)
        if resolved_config is not None:
            staged.join(dataset.CONFIG_FILE).write_bytes(dump_yaml(resolved_config).encode("utf-8"))
        staging.check_staged(staged, where, manifest)
        return stage.Manifest(manifest, dataset_writer.manifest_bytes(manifest))

    outcome = stage.run(dataset_stage, work, force=force)
    if outcome.skipped:
        log.info("%s is up to date (fingerprint %s): nothing to do", where, print_[:12])
    else:
        log.info("published %s in %.1fs", where, time.monotonic() - started)
    return PrepareResult(outcome.manifest, skipped=outcome.skipped, seconds=time.monotonic() - started)


@contextmanager
def _interrupt_is_keyboard_interrupt() -> Iterator[None]:
    """A SIGINT stops the job as KeyboardInterrupt, even when Beam's runner re-raises it as another error or
    lets the job finish (a thread of its own that caught it): nothing is published after a Ctrl+C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen: list[int] = []

    def interrupted(signum: int, frame: Any) -> None:
        seen.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    except Exception:
        if seen:
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    if seen:
        raise KeyboardInterrupt


def warn_unchecked_scripts(config: PrepareConfig) -> list[str]:
    """Warn once per language whose script is unknown (a code like `xx`): its sentences are kept whatever
    their script. Returns those languages."""
    if config.filters.min_script_fraction == 0:
        return []
    known = {**SCRIPTS, **config.filters.scripts}
    unknown = [lang for lang in config.languages if lang not in known and base_language(lang) not in known]
    for lang in unknown:
        log.warning(
            "language %r: no script known for it, so its sentences are not checked for script "
            "(wrong_script); if it is a real language, set prepare.filters.scripts.%s: [<Unicode script>]",
            lang,
            lang,
        )
    return unknown


def _warn_unchecked_languages(config: PrepareConfig) -> None:
    if config.filters.language_id.enabled:
        from pipelines.langid import unchecked_languages

        unknown = unchecked_languages(config.languages)
        if unknown:
            log.warning(
                "prepare.filters.language_id: the model does not know %s: their sentences are not checked",
                ", ".join(unknown),
            )


def _run_job(
    config: PrepareConfig,
    plan: sources.SourcePlan,
    root: Location,
    options: PipelineOptions,
    trained_on: list[dataset.Dataset],
) -> dict[str, int]:
    """Run PrepareCorpus over the read tasks, writing under `root`; the summed stats."""
    pipeline = beam.Pipeline(options=for_cluster(options, tasks=len(plan.tasks)))
    try:
        with pipeline:
            _ = (
                pipeline
                | "CreateReadTasks" >> beam.Create(plan.tasks)
                | "PrepareCorpus" >> PrepareCorpus(config, root, trained_on)
            )
    finally:
        release(pipeline)
    written = root.join(STATS_FILE)
    stats = json.loads(written.read_bytes())
    written.delete()
    return stats


def summary(result: PrepareResult) -> str:
    """A few lines for people: tuples in and out, drops by reason, time."""
    m = result.manifest
    t = m.counts.tuples
    lines = [
        f"tuples read {t.read:,}; written " + ", ".join(f"{s} {n:,}" for s, n in t.out.items()),
        "tuples dropped: " + (", ".join(f"{r} {n:,}" for r, n in t.dropped.items()) or "none"),
    ]
    for lang, b in m.counts.sentences.items():
        drops = ", ".join(f"{r} {n:,}" for r, n in b.dropped.items()) or "none"
        lines.append(f"  {lang}: read {b.read:,}, written {sum(b.out.values()):,}; dropped: {drops}")
    lines.append(
        f"vocabulary {m.spm.vocab_size:,} BPE pieces; "
        + ("already up to date" if result.skipped else f"done in {result.seconds:.1f}s")
    )
    return "\n".join(lines)
