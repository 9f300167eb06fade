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

Its state is a `Worker`, which `set_up` builds (both in `orchestration.train.worker`); where it stands, a
`checkpoint.TrainingProgress` (the line the driver draws is an `orchestration.adapters.progress.Progress`).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import resource
import time
from dataclasses import asdict

from core import fencing
from model.inference import dev_nll, embed_rows
from model.prefetch import PrefetchedStream
from model.training import input_tokens, scheduled_lr, train_step
from orchestration.adapters import logs
from orchestration.adapters.worker_fence import worker_fence
from orchestration.train import checkpoint, live
from orchestration.train.builders import WorkerJob, schedule_args, trained_decoders
from orchestration.train.checkpoint import TrainingState
from orchestration.train.distributed import broadcast, gather
from orchestration.train.window import Window, log_progress, remaining_s
from orchestration.train.worker import Worker, set_up

log = logging.getLogger("interlingua.train")


def train_loop_per_worker(ray_config: dict[str, WorkerJob]) -> None:
    """One worker's training, from Ray's config {"job": `builders.WorkerJob`} to its last checkpoint."""
    job = ray_config["job"]
    logs.configure_worker(logs.DEFAULT if job.verbosity is None else job.verbosity)
    # a driver whose lease was taken over (paused past it, then resumed) must not commit through its workers:
    # every metric logged and checkpoint reported first looks at the lease (`worker_fence`)
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
                worker.mlflow_run.log_metrics(metrics, n)
            post_progress(worker, metrics)
        if n % run.checkpoint_every_steps == 0 or stop:
            worker.progress.done = stop
            save_checkpoint(worker, metrics)
    if isinstance(worker.stream, PrefetchedStream):
        worker.stream.close()


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
        teacher_weight=batch.teacher_weight,
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
    frozen = worker.core.encoders_frozen  # the similarity error cannot move: the decoders' dev NLL decides
    nll = 0.0
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
        if frozen:  # from the same vectors
            targets = trained_decoders(worker.config, worker.job.languages)
            nll = dev_nll(worker.core, worker.dev, worker.dev_rows, targets, embeddings, device=worker.device)
    value, nll = broadcast([average_error(pairs) if pairs else 0.0, nll], worker.device)
    selected, best = (nll, progress.dev_nll) if frozen else (value, progress.dev_error)
    if worker.scheduler is not None and progress.step >= t.warmup_steps:
        worker.scheduler.step(selected)
    if best is None or selected < best:
        progress.dev_error, progress.best_step, progress.bad_evals = value, progress.step, 0
        progress.dev_nll = nll if frozen else None
        worker.best_state = copy.deepcopy(worker.core.state_dict())
    else:
        progress.bad_evals += 1
    patience = t.early_stop_patience_evals
    stop = patience is not None and progress.bad_evals >= patience
    if worker.rank == 0:
        if stop:
            log.info("early stop at step %d: no dev improvement in %d evaluations", progress.step, patience)
        metrics["dev/xsim_error"] = value
        if frozen:
            metrics["dev/nll"] = nll
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
        decoders=sorted(
            set(trained_decoders(worker.config, worker.job.languages))
            | set(worker.job.frozen.decoders if worker.job.frozen is not None else [])
        ),
    )
