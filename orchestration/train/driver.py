"""`interlingua train`: the driver that launches Ray Train on the prepared dataset.

    result = train(load_config("configs/bible6-cpu.yaml"))

One `TorchTrainer` runs `loop.train_loop_per_worker` on `runtime.num_workers`
workers (DDP over gloo on CPU, NCCL on GPU), on the Ray cluster at
`runtime.ray_address` or a local one. Checkpoints go to `<run_dir>/train/ray`
(a folder per lease holder in a bucket: `train.folders`); running the same
config again resumes from the last one, and a finished run is not trained again. What a run
depends on is its fingerprint: the dataset, `model` and `train` (never
`runtime`). The MLflow run is created here, handed to rank 0 for metrics,
given the artifacts at the end, and marked FAILED if training fails. The best
model (by dev similarity error) is exported to `<run_dir>/train/model/`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from core import connection
from core.dataset import Dataset
from core.errors import UserError
from core.location import Location
from core.schema import dump_yaml
from core.teacher import TeacherInput
from orchestration.adapters import cluster, lineage, logs
from orchestration.adapters import model_dir as model_files
from orchestration.adapters.cluster import check_every_node_reaches, ensure_ray
from orchestration.adapters.lease import held_lease
from orchestration.adapters.ray_private import interruptible_trainer
from orchestration.adapters.state import read_state, state_bytes
from orchestration.adapters.tracker import Tracker
from orchestration.config import Config, ConfigError
from orchestration.train import builders, folders, live
from orchestration.train import teacher as teachers
from orchestration.train import train_dir as train_dirs
from orchestration.train.builders import WorkerJob
from orchestration.train.frozen import FrozenModel
from orchestration.train.frozen import resolve as decoders_for
from orchestration.train.record import TrainRecord
from orchestration.train.train_dir import STATE_FILE, start_over

log = logging.getLogger(__name__)


class TrainError(UserError, RuntimeError):
    """A training run that cannot start as asked; the message says what to change."""


@dataclass
class TrainResult:
    model_dir: str | Path  # a local path or a URI
    run_id: str
    step: int | None  # None: a finished run recorded before its steps were kept
    dev_error: float | None
    skipped: bool


def worker_job(
    config: Config,
    data: Dataset,
    run_id: str,
    uri: str,
    teacher: teachers.TeacherSpec | None = None,
    frozen: FrozenModel | None = None,
) -> WorkerJob:
    """Everything a worker needs (absolute paths: workers run elsewhere); checks the config against the
    dataset first. The teacher's embeddings are added when they are ready (`teachers.embeddings`)."""
    languages = builders.trained_languages(config, data.languages)
    builders.check_losses(config)
    teachers.check(config, teacher, languages)
    data_dir = config.data_dir
    check_dev_tuples(config, builders.dev_languages(config, languages))
    args = frozen.args if frozen is not None else builders.model_args(config, languages, data.vocab_size)
    if teacher is not None:
        from model.model_file import embedding_size

        teachers.check_compatible(config, teacher, embedding_size(args))
        args = args.model_copy(update={"distill_dim": teacher.dim})
    return WorkerJob(
        config=config,
        model_args=args,
        languages=languages,
        dev_languages=builders.dev_languages(config, languages),
        data_dir=data_dir,
        spm_model=data.spm_model,
        train_dir=config.train_dir,
        mlflow_uri=uri,
        run_id=run_id,
        lease=held_lease(),
        frozen=frozen,
    )


def check_dev_tuples(config: Config, languages: list[str]) -> None:
    """TrainError unless the dev split holds at least 2 tuples with every language of the dev error: with
    fewer, the dev error would be `nan` (as with prepare.split.heldout_complete=false and a rare language)."""
    import pyarrow.compute as pc

    table = Dataset.open(config.data_dir).read("dev", [f"{lang}_len" for lang in languages])
    complete = pc.sum(functools.reduce(pc.and_, [pc.is_valid(column) for column in table.columns])).as_py() or 0
    if complete < 2:
        raise TrainError(
            f"{config.data_dir}: the dev split has {complete} tuple(s) with every one of {languages} "
            "(the dev error's languages), at least 2 are needed; set evaluate.languages to languages "
            "the dev tuples share, or prepare with prepare.split.heldout_complete=true"
        )


def check_source_weights(weights: dict[str, float], data: Dataset, key: str = "train.source_weights") -> None:
    """ConfigError, before any work, for a weight (of `key`) of a source the dataset does not hold."""
    if not weights:
        return
    sources = sorted(data.manifest.counts.sources)
    unknown = sorted(set(weights) - set(sources))
    if not sources or unknown:
        raise ConfigError(
            f"{key}: {unknown or sorted(weights)} not among the dataset's sources "
            f"{sources or '(not counted by source: prepare it again)'}"
        )


def train(
    config: Config,
    *,
    force: bool = False,
    restart_stale: bool = False,
    parent_run_id: str | None = None,
    callbacks: list | None = None,
    tags: dict[str, str] | None = None,
) -> TrainResult:
    """Train, resume, or skip a finished run. `restart_stale` starts over (instead of refusing) when
    the run dir holds checkpoints of another dataset or config: what a scheduled run wants after new data."""
    data = Dataset.open(config.data_dir)
    check_source_weights(config.train.source_weights, data)
    check_source_weights(config.model.distill_source_weights, data, "model.distill_source_weights")
    teacher = teachers.resolve(config)
    train_dir = Location.of(config.train_dir)  # a local path or a URI, read and written through its Location
    frozen = decoders_for(config, data, builders.trained_languages(config, data.languages))  # checked first
    fp = builders.train_fingerprint(
        config, data, teacher.identity if teacher else None, frozen.model_sha256 if frozen else None
    )
    tracker = Tracker.of(config)
    uri = tracker.uri
    tracker.check_reachable()  # seconds, not the client's minutes of retries after the work (or --force's)
    output = train_dirs.folder(train_dir)  # kept in place: a killed training resumes from it
    # --force starts over whatever it holds
    state = read_state((train_dir / STATE_FILE).text, TrainRecord) if not force else None
    if state and state.fingerprint != fp and restart_stale:
        log.info("%s was trained on another dataset or config; training again", train_dir)
        force = True
    if state and state.fingerprint != fp and not force:
        raise TrainError(
            f"{train_dir} holds a run of another dataset or model/train config; resuming it would mix "
            "them. Use --force to start over, or another run_dir."
        )
    found = output.check_replaceable()  # a user's file there: refused, with or without --force
    if force and found:
        start_over(train_dir, found)
        state = None
    model_dir = model_files.default(train_dir)
    if state and state.done and (Location.of(model_dir) / model_files.MODEL_FILE).exists():
        folders.remove_others(train_dir, keep={folders.current(state)})  # a late upload after the last removal
        log.info("%s is trained already (step %s); nothing to do", model_dir, state.step)
        return TrainResult(model_dir, state.run_id, state.step, state.dev_error, skipped=True)

    job = worker_job(config, data, "", uri, teacher, frozen)  # validates before anything starts
    # on the driver: a damaged shard is a user's error to report once, not a worker failure Ray retries
    data.verify(("train", "dev"))
    ensure_ray(
        config.runtime.ray_address,
        dashboard=config.runtime.ray_dashboard,
        worker_niceness=config.runtime.worker_niceness,
    )
    # before the MLflow run: a store or folder the workers on other hosts cannot share is refused
    check_every_node_reaches(uri, dataset_dir=str(config.data_dir), run_dir=str(train_dir))
    if teacher is not None:  # computed once per dataset and teacher, before the MLflow run
        job = dataclasses.replace(
            job,
            teacher=TeacherInput(
                teachers.embeddings(config, data, teacher),
                config.model.distill_pivot,
                every_language=config.model.distill_languages == "all",
                source_weights=config.model.distill_source_weights,
            ),
        )
    from orchestration.train import checkpoint  # torch: imported only when training

    folder = folders.new_folder(job.lease)  # Ray Train's storage: a folder of this lease holder's own
    resume = folders.last_checkpoint(train_dir, state) if state and folder != folders.SHARED else None
    folders.remove_others(train_dir, keep={folder, folders.current(state), *([resume.split("/")[0]] if resume else [])})

    # an interrupt ends the run KILLED, any other error FAILED (`Tracker.run`)
    with tracker.run(
        config.name,
        config.to_dict(),
        stage="train",
        resume_run_id=state.run_id if state else None,
        parent_run_id=parent_run_id,
        tags=tags,
        inputs=[lineage.prepared_input(data, context="training", splits=("train", "dev"))],
    ) as run:
        record = TrainRecord(fingerprint=fp, run_id=run.id, ray_dir=folder, resumed_from=resume)  # `train.folders`
        output.write_record(STATE_FILE, state_bytes(record))  # first: it vouches for what follows
        output.write_record(model_files.CONFIG_FILE, dump_yaml(config.to_dict()).encode())
        job = dataclasses.replace(job, run_id=run.id, resume_from=(train_dir / resume).text if resume else None)
        compatible = (
            {
                "compatible_with": Location.of(config.train.compatible_with).identity,
                "compatible_with_sha256": teacher.identity["sha256"],
            }
            if teacher is not None and config.train.compatible_with is not None
            else {}
        )
        progress = checkpoint.export(
            _fit(job, train_dir, folder, callbacks or []), model_dir, data, lineage_extra=compatible
        )
        run.log_artifacts(model_files.fetch(model_dir), "model")
        if progress.dev_error is not None:  # one value per run, what `compare --stage train` sorts by
            run.log_metrics({"dev/best_xsim_error": progress.dev_error}, progress.step)
    output.write_record(STATE_FILE, state_bytes(record.finished(progress)))
    folders.remove_others(train_dir, keep={folder})  # a woken holder's late upload among them
    return TrainResult(model_dir, run.id, progress.step, progress.dev_error, skipped=False)


def _fit(job: WorkerJob, train_dir: Location, folder: str, callbacks: list):
    """Ray Train's run, its progress drawn here; the last reported checkpoint (it holds the best model so far)."""
    ensure_ray(
        job.config.runtime.ray_address,
        dashboard=job.config.runtime.ray_dashboard,
        worker_niceness=job.config.runtime.worker_niceness,
    )
    with live.shown(
        job.config.train.max_steps, max_minutes=job.config.train.max_minutes
    ) as board:  # training's one progress line, on this process
        # the workers log at the command's level, rank 0 posts its progress to the board
        return _run_trainer(
            dataclasses.replace(job, verbosity=logs.verbosity(), progress_board=board), train_dir, folder, callbacks
        )


def _run_trainer(job: WorkerJob, train_dir: Location, folder: str, callbacks: list):
    # Ray Train v2's (what `ray.train` exports in Ray 2.60), named so: its RunConfig takes the worker settings below
    from ray.train.v2.api.config import CheckpointConfig, FailureConfig, LoggingConfig, RunConfig, ScalingConfig

    from orchestration.train.loop import train_loop_per_worker

    r = job.config.runtime
    resources = {"CPU": r.cpus_per_worker, **({"GPU": 1} if r.use_gpu else {}), **r.train_resources}
    trainer = interruptible_trainer(owns_ray=cluster.owns_ray())(
        train_loop_per_worker,
        train_loop_config={"job": job},  # Ray Train wants a dict
        scaling_config=ScalingConfig(num_workers=r.num_workers, use_gpu=r.use_gpu, resources_per_worker=resources),
        run_config=RunConfig(
            # at a URI, Ray Train writes and reads its checkpoints through the same filesystem as the rest
            **folders.storage_args(train_dir, folder),
            failure_config=FailureConfig(max_failures=r.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=r.keep_checkpoints),
            worker_runtime_env={"env_vars": {**connection.environment(), **r.worker_env}},
            callbacks=callbacks,
            logging_config=LoggingConfig(log_level=logs.ray_train_log_level()),  # reports, checkpoints: -v
        ),
    )
    sigint = signal.getsignal(signal.SIGINT)
    try:
        result = trainer.fit()
    except SystemExit:
        # Ray Train's SIGINT handler aborts the run and calls sys.exit, which Ray's ray.get turns into
        # SystemExit(1): the CLI would exit 1 with no word. An interrupt is a KeyboardInterrupt here.
        if trainer.interrupted:
            raise KeyboardInterrupt from None
        raise
    finally:
        # fit() leaves its handler installed: a later Ctrl+C (or the run lock's lost lease) in this process
        # would go to a finished run's abort instead of raising KeyboardInterrupt
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, sigint)
    if result.checkpoint is None:
        raise TrainError(f"training ended without a checkpoint in {train_dir / folder}")
    folders.prune_checkpoints(train_dir, folder)
    return result.checkpoint
