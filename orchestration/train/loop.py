"""The training recipe: `train_loop_per_worker`, run by Ray Train on every worker.

    set_up          the config, this worker's batch stream (`model.stream.BatchStream`: its own
                    share of the shards, a bounded window at a time; on a GPU built ahead by a
                    worker process, `prefetched`), the (DDP-wrapped) model,
                    the optimizer and schedule, restored from Ray's checkpoint when restarting,
                    the stream at the data position it had reached
    step            one homogeneous batch (a training path's signature): `model.training.train_step`
    end_of_window   every `runtime.log_every_steps`: metrics, the progress posted to the driver's line
                    (`live`; the worker's own line with -v), the time limit
    evaluate_dev    every `train.eval_every_steps`: rank 0 measures the dev similarity error, which
                    drives ReduceLROnPlateau, the best model and early stopping on every rank alike
    checkpoint      every `runtime.checkpoint_every_steps`: `checkpoint.report`

Its state is a `Worker`, where it stands a `checkpoint.TrainingProgress` (the line the driver draws
is an `orchestration.adapters.progress.Progress`).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import os
import resource
import socket
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from core import fencing, storage
from core.dataset import Dataset
from model.batching import ParallelCorpus, dev_rows_by_source, sample_corpus, shard_units
from model.inference import embed_rows
from model.nmt import MultilingualNMT
from model.stream import PLAN, BatchStream, DataPosition, PrefetchedStream, prefetched
from model.training import cpu_threads, input_tokens, make_optimizer, scheduled_lr, train_step
from orchestration.adapters import logs, tracking
from orchestration.adapters.lease import worker_fence
from orchestration.config import Config
from orchestration.train import checkpoint, live
from orchestration.train.builders import WorkerJob, schedule_args, training_paths
from orchestration.train.checkpoint import TrainingProgress, TrainingState
from orchestration.train.distributed import broadcast, gather
from orchestration.train.window import Window, log_progress, remaining_s

log = logging.getLogger("interlingua.train")


@dataclass
class Worker:
    """One worker's training: what it trains, on what, and where it stands."""

    job: WorkerJob  # what the driver sent (`driver.worker_job`)
    rank: int
    device: torch.device
    model: torch.nn.Module  # DDP-wrapped with several workers
    core: MultilingualNMT  # the model itself
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.ReduceLROnPlateau | None
    progress: TrainingProgress
    best_state: dict[str, Any]
    stream: BatchStream | PrefetchedStream = field(repr=False)
    dev: ParallelCorpus | None = None  # rank 0 only
    dev_rows: np.ndarray | None = None
    dev_sources: dict[str, np.ndarray] = field(default_factory=dict)  # rank 0: {source: positions in dev_rows}
    logged_through: int = 0  # rank 0: the last step whose metrics the run holds (a resumed run logs after it)

    @property
    def config(self) -> Config:
        return self.job.config


def train_loop_per_worker(ray_config: dict[str, WorkerJob]) -> None:
    """One worker's training, from Ray's config {"job": `builders.WorkerJob`} to its last checkpoint."""
    job = ray_config["job"]
    logs.configure_worker(logs.DEFAULT if job.verbosity is None else job.verbosity)
    # a driver whose lease was taken over (paused past it, then resumed) must not commit through its workers:
    # every metric logged and checkpoint reported first looks at the lease (`lease.worker_fence`)
    with fencing.fenced(worker_fence(job.lease)) if job.lease else contextlib.nullcontext():
        _train(job)


def _train(job: WorkerJob) -> None:
    worker = set_up(job)
    run, window = worker.config.runtime, Window(job.languages)
    started, elapsed_before = time.monotonic(), worker.progress.elapsed_s
    stop = worker.progress.done
    while not stop:
        epoch = step(worker, window)
        worker.progress.elapsed_s = elapsed_before + time.monotonic() - started
        n = worker.progress.step
        metrics: dict[str, float] = {}
        if n % run.log_every_steps == 0 or n >= worker.config.train.max_steps:
            stop = end_of_window(worker, window, epoch, metrics)
        if n % worker.config.train.eval_every_steps == 0 or stop:
            stop = evaluate_dev(worker, metrics) or stop
        if metrics and worker.rank == 0:
            if n > worker.logged_through:  # a step the killed attempt had logged is not logged twice
                tracking.log_metrics(job.mlflow_uri, job.run_id, metrics, n)
            post_progress(worker, metrics)
        if n % run.checkpoint_every_steps == 0 or stop:
            worker.progress.done = stop
            save_checkpoint(worker, metrics)
    if isinstance(worker.stream, PrefetchedStream):
        worker.stream.close()


def set_up(job: WorkerJob) -> Worker:
    """This worker's model, optimizer, data and stream, from Ray's checkpoint when restarting."""
    import ray.train
    import ray.train.torch

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    config = job.config
    t = config.train
    cpu_threads(config.runtime.cpus_per_worker)  # first: Ray Train runs this loop in a thread of its own
    device = ray.train.torch.get_device()
    _register_worker(job.train_dir, rank, world)

    units = shard_units(Dataset.open(job.data_dir).files("train"))
    torch.manual_seed(t.seed)  # the initial weights: the same on every worker and in every attempt
    model = MultilingualNMT.build(job.model_args)
    state = checkpoint.restore(job.resume_from)
    if model.output == "adaptive" or (config.model.embed_init == "lsi" and not state):
        sample = sample_corpus(units, job.languages, t.sample_tuples)  # read once, then let go
        if model.output == "adaptive":
            model.set_token_order(torch.from_numpy(sample.token_counts(model.vocab_size)))
        if not state:
            _init_lsi(model, sample, t.seed, rank)
        del sample
    if state:
        model.load_state_dict(state.model)
    torch.manual_seed(t.seed * 1000 + rank + (state.progress.step if state else 0))
    wrapped = ray.train.torch.prepare_model(model, parallel_strategy_kwargs={"find_unused_parameters": True})
    core = wrapped.module if hasattr(wrapped, "module") else wrapped  # DDP's module: the model itself
    if not isinstance(core, MultilingualNMT):
        raise TypeError(f"ray.train.torch.prepare_model wrapped the model as {type(core).__name__}, not DDP")
    optimizer = make_optimizer(wrapped, lr=t.lr, weight_decay=t.weight_decay, device=device)
    scheduler = (
        torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="min", factor=t.lr_decay, patience=t.lr_patience_evals, min_lr=t.min_lr
        )
        if t.schedule == "plateau"
        else None
    )
    progress, best_state = TrainingProgress(world=world), copy.deepcopy(core.state_dict())
    if state:
        optimizer.load_state_dict(state.optimizer)
        if scheduler is not None:
            if state.scheduler is None:  # train.schedule is in the run's fingerprint: a resume keeps it
                raise ValueError(
                    "the checkpoint holds no LR scheduler state: it was trained with another train.schedule"
                )
            scheduler.load_state_dict(state.scheduler)
        progress, best_state = _resumed(state.progress, world, rank), state.best_model
    position, digest = _stream_start(state, rank, world)
    batches = BatchStream(
        units,
        job.languages,
        training_paths(t),
        seed=t.seed,
        rank=rank,
        world=world,
        max_tokens=t.max_tokens,
        window_tuples=t.window_tuples,
        monolingual=t.monolingual,
        source_weights=t.source_weights,
        position=position,
        digest=digest,
        teacher=job.teacher,
    )
    ahead = config.runtime.prefetch_batches
    stream = prefetched(
        batches, 8 if ahead is None and config.runtime.use_gpu else ahead or 0, pin_memory=device.type == "cuda"
    )
    worker = Worker(job, rank, device, wrapped, core, optimizer, scheduler, progress, best_state, stream)
    if rank == 0:
        # opens the tracking store (imports, engine, schema check: seconds with sqlite) before
        # the first step: the first metrics window measures training, and a bad store fails now
        tracking.get_run(job.mlflow_uri, job.run_id)
        if state:  # the attempt that was stopped logged past its last checkpoint, up to its last window
            worker.logged_through = max(
                (
                    s
                    for key in ("train/loss", "dev/xsim_error")
                    for s, _ in tracking.metric_history(job.mlflow_uri, job.run_id, key)
                ),
                default=0,
            )
        worker.dev = ParallelCorpus.read(job.data_dir, "dev", job.dev_languages, keys=True)
        worker.dev_rows, worker.dev_sources = dev_rows_by_source(worker.dev, t.dev_max_sentences)
        live.post(job.progress_board, step=progress.step)
    return worker


def step(worker: Worker, window: Window) -> int:
    """One optimizer step on the next batch of the stream; returns the batch's epoch."""
    batch = next(worker.stream)
    lr = scheduled_lr(worker.progress.step, worker.progress.elapsed_s, **schedule_args(worker.config.train))
    if lr is not None:
        for group in worker.optimizer.param_groups:
            group["lr"] = lr
    sources, targets = batch.sources, batch.targets
    ranking_weight = worker.config.model.ranking_weight
    out = train_step(
        worker.model,
        worker.optimizer,
        sources,
        targets,
        ranking_weight=ranking_weight,
        grad_clip=worker.config.train.grad_clip,
        device=worker.device,
        teacher=batch.teacher,
        distill_weight=worker.config.model.distill_weight,
    )
    worker.progress.step += 1
    window.add(out, input_tokens(sources, targets, ranking_weight))
    return batch.epoch


def end_of_window(worker: Worker, window: Window, epoch: int, metrics: dict[str, float]) -> bool:
    """The window's metrics into `metrics`, the progress line; True when the step or time budget is spent
    (rank 0's clock decides for every rank)."""
    t, progress = worker.config.train, worker.progress
    metrics.update(window.metrics(worker.device))
    if not math.isfinite(metrics["train/loss"]):  # summed over workers: every rank stops here
        raise FloatingPointError(
            f"training diverged: the loss is {metrics['train/loss']} before step "
            f"{progress.step}; lower train.lr, set train.grad_clip or raise train.warmup_steps"
        )
    metrics["train/lr"] = worker.optimizer.param_groups[0]["lr"]
    metrics["train/epoch"] = epoch
    metrics["train/max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # this worker's peak
    over_time = t.max_minutes is not None and progress.elapsed_s >= 60 * t.max_minutes
    stop = bool(broadcast([float(over_time)], worker.device)[0]) or progress.step >= t.max_steps
    if worker.rank == 0 and logs.verbosity() >= logs.VERBOSE:  # the driver draws the one progress line
        log_progress(progress.step, metrics, progress.elapsed_s, max_steps=t.max_steps, max_minutes=t.max_minutes)
    window.reset()
    return stop


def evaluate_dev(worker: Worker, metrics: dict[str, float]) -> bool:
    """Rank 0's dev error, on every rank: LR plateau, best model, early stop (True when it is time)."""
    from evaluation.xsim import average_error, error_matrix

    progress, t = worker.progress, worker.config.train
    pairs: dict[tuple[str, str], float] = {}  # rank 0's
    by_source: dict[str, float] = {}
    if worker.rank == 0:
        if worker.dev is None or worker.dev_rows is None:  # `set_up` reads them on rank 0
            raise RuntimeError("rank 0 has no dev tuples to measure the dev error on")
        embeddings = embed_rows(worker.core, worker.dev, worker.dev_rows, device=worker.device)
        pairs = error_matrix(embeddings)
        by_source = {
            name: average_error(error_matrix({lang: e[at] for lang, e in embeddings.items()}))
            for name, at in worker.dev_sources.items()
            if len(at) > 1
        }
    value = broadcast([average_error(pairs) if pairs else 0.0], worker.device)[0]
    if worker.scheduler is not None and progress.step >= t.warmup_steps:
        worker.scheduler.step(value)
    if progress.dev_error is None or value < progress.dev_error:
        progress.dev_error, progress.best_step, progress.bad_evals = value, progress.step, 0
        worker.best_state = copy.deepcopy(worker.core.state_dict())
    else:
        progress.bad_evals += 1
    patience = t.early_stop_patience_evals
    stop = patience is not None and progress.bad_evals >= patience
    if worker.rank == 0:
        if stop:
            log.info("early stop at step %d: no dev improvement in %d evaluations", progress.step, patience)
        metrics["dev/xsim_error"] = value
        metrics.update({f"dev/xsim_error/{p}-{q}": e for (p, q), e in pairs.items()})
        # each source's tuples searched among themselves: how the model does on each kind of text
        metrics.update({f"dev/source_xsim_error/{name}": e for name, e in by_source.items()})
        if logs.verbosity() >= logs.VERBOSE:  # else the driver's progress line shows the best
            log.info(
                "step %d dev similarity error %.4f (best %.4f at step %s)",
                progress.step,
                value,
                progress.dev_error,
                progress.best_step,
            )
    return stop


def post_progress(worker: Worker, metrics: dict[str, float]) -> None:
    """Rank 0's numbers to the driver's progress line (`live`): step, ETA, tokens/s, the best dev error."""
    t, progress = worker.config.train, worker.progress
    live.post(
        worker.job.progress_board,
        step=progress.step,
        tokens_per_s=metrics.get("train/tokens_per_s"),
        eta_s=remaining_s(progress.step, progress.elapsed_s, max_steps=t.max_steps, max_minutes=t.max_minutes),
        dev_error=progress.dev_error,
    )


def save_checkpoint(worker: Worker, metrics: dict[str, float]) -> None:
    """Every rank reports; rank 0 with the checkpoint (`checkpoint.report`), which holds every rank's
    data position."""
    positions = gather({"position": asdict(worker.stream.position), "digest": worker.stream.digest})
    worker.progress.data, worker.progress.data_digest = worker.stream.position, worker.stream.digest
    state = TrainingState(
        worker.core.state_dict(),
        worker.optimizer.state_dict(),
        worker.scheduler.state_dict() if worker.scheduler is not None else None,
        worker.progress,
        worker.best_state,
        dict(enumerate(positions)),
    )
    checkpoint.report(
        worker.rank,
        state,
        worker.core.args,
        spm_model=worker.job.spm_model,
        config=worker.config.to_dict(),
        metrics=metrics,
    )


def _stream_start(state: TrainingState | None, rank: int, world: int) -> tuple[DataPosition | None, str]:
    """Where this rank's stream goes on: the position it had reached, or a fresh epoch after the
    furthest one when the number of workers changed (the shares of an epoch depend on it) or the
    checkpoint's windows were planned by another version of the plan (`model.stream.PLAN`)."""
    if not state:
        return None, ""
    positions = {r: DataPosition.from_dict(p["position"]) for r, p in state.positions.items()}
    plans = {p.plan for p in positions.values()} or {state.progress.data.plan}
    if len(positions) == world and plans == {PLAN}:
        return positions[rank], state.positions[rank]["digest"]
    if plans != {PLAN} and rank == 0:
        log.warning(
            "the checkpoint's batches were planned by plan %s, this version plans with %d: "
            "training goes on from the next epoch",
            "/".join(map(str, sorted(plans))),
            PLAN,
        )
    epoch = max([p.epoch for p in positions.values()] or [state.progress.data.epoch])
    return DataPosition(epoch=epoch + 1), ""


def _resumed(progress: TrainingProgress, world: int, rank: int) -> TrainingProgress:
    if progress.world != world:
        log.warning("resumed with %d workers instead of %d: batch plans differ from here on", world, progress.world)
    progress.history.append({"resumed_at_step": progress.step, "world": world})
    progress.world = world
    if rank == 0:
        log.info("resumed from step %d", progress.step)
    return progress


def _init_lsi(model: MultilingualNMT, corpus: ParallelCorpus, seed: int, rank: int) -> None:
    """Cross-language LSI token embeddings from the training sample (the same on every worker, so all
    start alike; DDP copies rank 0's weights anyway)."""
    from model.lsi import cooccurrence_matrix, lsi_embeddings

    started = time.monotonic()
    matrix = cooccurrence_matrix(
        [corpus.values[lang] for lang in corpus.languages],
        [corpus.lengths[lang] for lang in corpus.languages],
        vocab_size=model.vocab_size,
    )
    model.set_token_embeddings(torch.from_numpy(lsi_embeddings(matrix, dim=model.embed_dim, seed=seed)))
    if rank == 0:
        log.info(
            "token embeddings from cross-language LSI of %d tuples in %.1fs", corpus.size, time.monotonic() - started
        )


def _register_worker(train_dir: str, rank: int, world: int) -> None:
    """workers/rank-N.json: which process on which node holds each rank (for operators and fault tests)."""
    import ray

    info = {
        "pid": os.getpid(),
        "node": socket.gethostname(),
        "ip": ray.util.get_node_ip_address(),
        "world": world,
        "started": time.time(),
    }
    storage.write_json(storage.join(train_dir, "workers", f"rank-{rank}.json"), info, indent=None)
