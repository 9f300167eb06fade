"""One training worker's state (`Worker`) and its set-up (`set_up`): the model, optimizer and schedule, restored
from Ray's checkpoint when restarting; this worker's batch stream at the data position it had reached (on a GPU
built ahead by a worker process: `model.prefetch`); on rank 0, the dev tuples and the tracking store opened.
"""

from __future__ import annotations

import copy
import logging
import os
import socket
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from core.dataset import Dataset
from core.location import Location
from model.batching import ParallelCorpus, dev_rows_by_source, sample_corpus, shard_units
from model.nmt import MultilingualNMT
from model.prefetch import PrefetchedStream, prefetched
from model.stream import PLAN, BatchStream, DataPosition
from model.training import cpu_threads, make_optimizer
from orchestration.adapters import tracking
from orchestration.adapters.tracker import TrackedRun
from orchestration.config import Config
from orchestration.train import checkpoint, live
from orchestration.train.builders import WorkerJob, training_paths
from orchestration.train.checkpoint import TrainingProgress, TrainingState

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
    best_state: dict[str, torch.Tensor]  # the model's state at its best dev error
    stream: BatchStream | PrefetchedStream = field(repr=False)
    dev: ParallelCorpus | None = None  # rank 0 only
    dev_rows: np.ndarray | None = None
    dev_sources: dict[str, np.ndarray] = field(default_factory=dict)  # rank 0: {source: positions in dev_rows}
    logged_through: int = 0  # rank 0: the last step whose metrics the run holds (a resumed run logs after it)

    @property
    def config(self) -> Config:
        return self.job.config

    @property
    def mlflow_run(self) -> TrackedRun:
        """The training's MLflow run, which rank 0 logs to: the store and run id the driver sent (`WorkerJob`)."""
        return TrackedRun(self.job.mlflow_uri, self.job.run_id)


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
    if job.frozen is not None:  # the model's own weights, its token order too; its encoders never change
        if not state:
            from orchestration.train.frozen import load

            model.load_state_dict(load(job.frozen).state_dict())
        model.freeze_encoders()
    elif model.output == "adaptive" or (config.model.embed_init == "lsi" and not state):
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
        run = worker.mlflow_run
        run.get()
        if state:  # the attempt that was stopped logged past its last checkpoint, up to its last window
            worker.logged_through = max(
                (
                    s
                    for key in ("train/loss", "dev/xsim_error")
                    for s, _ in tracking.metric_history(run.uri, run.id, key)
                ),
                default=0,
            )
        worker.dev = ParallelCorpus.read(job.data_dir, "dev", job.dev_languages, keys=True)
        worker.dev_rows, worker.dev_sources = dev_rows_by_source(worker.dev, t.dev_max_sentences)
        live.post(job.progress_board, step=progress.step)
    return worker


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
    Location.of(train_dir).join("workers", f"rank-{rank}.json").write_json(info, indent=None)
