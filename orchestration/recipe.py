"""The training recipe: `train_loop_per_worker`, run by Ray Train on every worker.

Per step: one homogeneous batch (a training path's signature) per worker,
forward through the (DDP-wrapped) model, backward, clip, Adam. Every
`eval_every_steps` rank 0 measures the dev similarity error, which drives
ReduceLROnPlateau and early stopping on every rank alike (the value is
broadcast). Every `checkpoint_every_steps` rank 0 saves model, optimizer,
scheduler, step (= the data position), config, sentencepiece model and the
best model so far, through `ray.train.report`.
"""
from __future__ import annotations

import copy
import json
import logging
import math
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from model.inference import embed
from model.nmt import MultilingualNMT, save_model
from model.paths import TrainingPath
from orchestration.corpus import ParallelCorpus, batch_stream, to_device

log = logging.getLogger("interlingua.train")


def _paths(train: dict[str, Any]) -> list[TrainingPath]:
    return [
        TrainingPath(
            kind=p["kind"], weight=p["weight"], m=p["m"],
            sources=tuple(p["sources"]) if p["sources"] else None,
            targets=tuple(p["targets"]) if p["targets"] else None,
        )
        for p in train["paths"]
    ]


def _broadcast(values: list[float], device: torch.device) -> list[float]:
    """Rank 0's values on every rank (identical LR, early-stop and time-limit decisions)."""
    if not torch.distributed.is_initialized():
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    torch.distributed.broadcast(tensor, src=0)
    return tensor.tolist()


def _all_sum(values: list[float], device: torch.device) -> list[float]:
    if not torch.distributed.is_initialized():
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    torch.distributed.all_reduce(tensor)
    return tensor.tolist()


def scheduled_lr(t: dict[str, Any], step: int, elapsed_s: float) -> float | None:
    """The learning rate of the step after `step` steps and `elapsed_s` seconds of training; None where
    ReduceLROnPlateau owns it (the plateau schedule after warmup)."""
    if step < t["warmup_steps"]:
        return t["lr"] * (step + 1) / t["warmup_steps"]
    schedule = t["schedule"]
    if schedule == "plateau":
        return t["lr"] if step == t["warmup_steps"] and step > 0 else None
    if schedule == "constant":
        return t["lr"]
    if schedule == "inverse_sqrt":
        return t["lr"] * math.sqrt(max(t["warmup_steps"], 1) / (step + 1))
    done = step / t["max_steps"]  # cosine over the nearer of the two budgets
    if t["max_minutes"] is not None:
        done = max(done, elapsed_s / (60 * t["max_minutes"]))
    return t["min_lr"] + (t["lr"] - t["min_lr"]) * 0.5 * (1 + math.cos(math.pi * min(done, 1.0)))


def dev_error(model: MultilingualNMT, dev: ParallelCorpus, rows: np.ndarray, device: torch.device) -> dict:
    """Similarity error of every ordered language pair on the dev tuples `rows`."""
    from evaluation.xsim import average_error, error_matrix

    embeddings = {
        lang: embed(model, [dev.ids(lang, r) for r in rows], lang, device=device, autocast=device.type == "cuda")
        for lang in dev.languages
    }
    matrix = error_matrix(embeddings)
    return {"average": average_error(matrix), "pairs": {f"{p}-{q}": e for (p, q), e in matrix.items()}}


class Window:
    """Sums between two log lines: NLL and tokens per target language, ranking loss, wall and CPU time."""

    def __init__(self, languages: list[str]) -> None:
        self.languages = languages
        self.reset()

    def reset(self) -> None:
        self.nll = dict.fromkeys(self.languages, 0.0)
        self.tokens = dict.fromkeys(self.languages, 0.0)
        self.loss = self.ranking = self.steps = self.input_tokens = 0.0
        self.start, self.cpu_start = time.monotonic(), time.process_time()

    def add(self, out: dict[str, Any], input_tokens: int) -> None:
        # sums stay tensors on the model's device: a float() per step would wait for the GPU every step
        for lang, value in out["nll"].items():
            self.nll[lang] += value.detach()
            self.tokens[lang] += out["tokens"][lang]
        self.loss += out["loss"].detach()
        if out["ranking"] is not None:
            self.ranking += out["ranking"].detach()
        self.steps += 1
        self.input_tokens += input_tokens

    def metrics(self, device: torch.device) -> dict[str, float]:
        """Summed over workers; per-language perplexity of the decoders.

        `train/cpu_cores` is the CPU time of the worker processes (all their
        threads) per second of the window: about `cpus_per_worker` x workers
        when the CPUs are theirs, less when something else takes them or the
        workers wait (for data, a GPU, each other).
        """
        keys = self.languages
        cpu_seconds = time.process_time() - self.cpu_start
        values = _all_sum([float(v) for v in (
            [self.nll[k] for k in keys] + [self.tokens[k] for k in keys]
            + [self.loss, self.ranking, self.steps, self.input_tokens, cpu_seconds]
        )], device)
        n = len(keys)
        nll, tokens, (loss, ranking, steps, input_tokens, cpu_seconds) = values[:n], values[n:2 * n], values[2 * n:]
        seconds = max(time.monotonic() - self.start, 1e-9)
        out = {
            "train/loss": loss / max(steps, 1),
            "train/nll_per_token": sum(nll) / max(sum(tokens), 1),
            "train/tokens_per_s": (input_tokens + sum(tokens)) / seconds,
            "train/cpu_cores": cpu_seconds / seconds,
        }
        if ranking:
            out["train/ranking_loss"] = ranking / max(steps, 1)
        for lang, s, t in zip(keys, nll, tokens):
            if t:
                out[f"train/ppl/{lang}"] = math.exp(min(s / t, 50.0))
        return out


def train_loop_per_worker(cfg: dict[str, Any]) -> None:
    import ray.train
    import ray.train.torch

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    t = cfg["train"]
    torch.set_num_threads(t["cpus_per_worker"])
    device = ray.train.torch.get_device()
    autocast = device.type == "cuda"
    _register_worker(Path(cfg["train_dir"]), rank, world)

    languages = cfg["languages"]
    corpus = ParallelCorpus.read(cfg["train_files"], languages)
    model = MultilingualNMT(**cfg["model_args"])
    if model.args["output"] == "adaptive":
        model.set_token_order(torch.from_numpy(corpus.token_counts(model.args["vocab_size"])))
    state = _restore()
    if state:
        model.load_state_dict(state["model"])
    elif cfg["config"]["model"]["embed_init"] == "lsi":
        _init_lsi(model, corpus, t["seed"], rank)
    torch.manual_seed(t["seed"] * 1000 + rank + (state["progress"]["step"] if state else 0))
    model = ray.train.torch.prepare_model(model, parallel_strategy_kwargs={"find_unused_parameters": True})
    core: MultilingualNMT = model.module if hasattr(model, "module") else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=t["lr"], weight_decay=t["weight_decay"])
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, mode="min", factor=t["lr_decay"], patience=t["lr_patience_evals"], min_lr=t["min_lr"]
    ) if t["schedule"] == "plateau" else None
    progress = {"step": 0, "elapsed_s": 0.0, "dev_error": None, "best_step": None, "bad_evals": 0,
                "history": [], "done": False, "world": world}
    best_state = copy.deepcopy(core.state_dict())
    if state:
        optimizer.load_state_dict(state["optimizer"])
        if scheduler is not None:
            scheduler.load_state_dict(state["scheduler"])
        progress = state["progress"]
        best_state = state["best_model"]
        if progress["world"] != world:
            log.warning("resumed with %d workers instead of %d: batch plans differ from here on",
                        world, progress["world"])
        progress["history"].append({"resumed_at_step": progress["step"], "world": world})
        progress["world"] = world
        if rank == 0:
            log.info("resumed from step %d", progress["step"])

    dev = dev_rows = None
    if rank == 0:
        from orchestration import tracking

        # opens the tracking store (imports, engine, schema check: seconds with sqlite) before
        # the first step: the first metrics window measures training, and a bad store fails now
        tracking.get_run(cfg["mlflow"]["uri"], cfg["mlflow"]["run_id"])
        dev = ParallelCorpus.read(cfg["dev_files"], cfg["dev_languages"])
        dev_rows = dev.complete_rows()[: t["dev_max_sentences"]]
    stream = batch_stream(
        corpus, _paths(t), seed=t["seed"], rank=rank, world=world, max_tokens=t["max_tokens"],
        monolingual=t["monolingual"], skip=progress["step"],
    )
    window = Window(languages)
    ranking_weight = cfg["config"]["model"]["ranking_weight"]
    started, elapsed_before = time.monotonic(), progress["elapsed_s"]
    stop = progress["done"]
    while not stop:
        epoch, signature, rows = next(stream)
        lr = scheduled_lr(t, progress["step"], progress["elapsed_s"])
        if lr is not None:
            for group in optimizer.param_groups:
                group["lr"] = lr
        sources, targets = corpus.batch(signature, rows)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            out = model(to_device(sources, device), to_device(targets, device), ranking_weight=ranking_weight)
        optimizer.zero_grad(set_to_none=True)
        out["loss"].backward()
        if t["grad_clip"]:
            torch.nn.utils.clip_grad_norm_(model.parameters(), t["grad_clip"])
        optimizer.step()
        progress["step"] += 1
        step = progress["step"]
        encoded = {**sources, **targets} if ranking_weight > 0 else sources  # the ranking encodes the targets too
        window.add(out, int(sum(lens.sum() for _, lens in encoded.values())))
        progress["elapsed_s"] = elapsed_before + time.monotonic() - started

        metrics: dict[str, float] = {}
        if step % t["log_every_steps"] == 0 or step >= t["max_steps"]:
            metrics.update(window.metrics(device))
            metrics["train/lr"] = optimizer.param_groups[0]["lr"]
            metrics["train/epoch"] = epoch
            over_time = t["max_minutes"] is not None and progress["elapsed_s"] >= 60 * t["max_minutes"]
            stop = bool(_broadcast([float(over_time)], device)[0]) or step >= t["max_steps"]
            if rank == 0:
                _log_progress(step, metrics, progress["elapsed_s"], t)
            window.reset()
        evaluate = step % t["eval_every_steps"] == 0 or stop
        if evaluate:
            error = dev_error(core, dev, dev_rows, device) if rank == 0 else None
            value = _broadcast([error["average"] if error else 0.0], device)[0]
            if scheduler is not None and step >= t["warmup_steps"]:
                scheduler.step(value)
            if progress["dev_error"] is None or value < progress["dev_error"]:
                progress.update(dev_error=value, best_step=step, bad_evals=0)
                best_state = copy.deepcopy(core.state_dict())
            else:
                progress["bad_evals"] += 1
            patience = t["early_stop_patience_evals"]
            if patience is not None and progress["bad_evals"] >= patience:
                stop = True
                if rank == 0:
                    log.info("early stop at step %d: no dev improvement in %d evaluations", step, patience)
            if rank == 0:
                metrics["dev/xsim_error"] = value
                metrics.update({f"dev/xsim_error/{k}": v for k, v in error["pairs"].items()})
                log.info("step %d dev similarity error %.4f (best %.4f at step %s)",
                         step, value, progress["dev_error"], progress["best_step"])
        if metrics and rank == 0:
            tracking.log_metrics(cfg["mlflow"]["uri"], cfg["mlflow"]["run_id"], metrics, step)
        if step % t["checkpoint_every_steps"] == 0 or stop:
            progress["done"] = stop
            _report(rank, core, optimizer, scheduler, progress, best_state, cfg, metrics)


def _init_lsi(model: MultilingualNMT, corpus: ParallelCorpus, seed: int, rank: int) -> None:
    """Cross-language LSI token embeddings from this worker's training data (every worker reads all
    of it, so all start alike; DDP copies rank 0's weights anyway)."""
    from model.lsi import cooccurrence_matrix, lsi_embeddings

    started = time.monotonic()
    matrix = cooccurrence_matrix([corpus.values[lang] for lang in corpus.languages],
                                 [corpus.lengths[lang] for lang in corpus.languages],
                                 vocab_size=model.args["vocab_size"])
    model.set_token_embeddings(torch.from_numpy(lsi_embeddings(matrix, dim=model.args["embed_dim"], seed=seed)))
    if rank == 0:
        log.info("token embeddings from cross-language LSI of %d tuples in %.1fs", corpus.size,
                 time.monotonic() - started)


def _register_worker(train_dir: Path, rank: int, world: int) -> None:
    """workers/rank-N.json: which process on which node holds each rank (for operators and fault tests)."""
    folder = train_dir / "workers"
    folder.mkdir(parents=True, exist_ok=True)
    info = {"pid": os.getpid(), "node": socket.gethostname(), "world": world, "started": time.time()}
    (folder / f"rank-{rank}.json").write_text(json.dumps(info))


def _restore() -> dict[str, Any] | None:
    import ray.train

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as path:
        return torch.load(Path(path) / "state.pt", map_location="cpu", weights_only=False)


def _report(rank, core, optimizer, scheduler, progress, best_state, cfg, metrics) -> None:
    """Rank 0 writes a checkpoint directory; every rank calls `ray.train.report`."""
    import ray.train

    # not "done": Ray Tune reads that key as "this trial has finished" and stops it
    report = {"step": progress["step"], "dev_error": progress["dev_error"], "finished": progress["done"]}
    if rank != 0:
        ray.train.report(report, checkpoint=None)
        return
    from pipelines.config import dump_yaml

    with tempfile.TemporaryDirectory(prefix="interlingua-ckpt-") as tmp:
        torch.save({
            "model": core.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "progress": progress, "best_model": best_state,
        }, Path(tmp) / "state.pt")
        best = MultilingualNMT(**core.args)
        best.load_state_dict(best_state)
        save_model(best, str(Path(tmp) / "model.pt"), step=progress["best_step"], dev_error=progress["dev_error"])
        shutil.copy(cfg["spm_model"], Path(tmp) / "spm.model")
        (Path(tmp) / "config.yaml").write_text(dump_yaml(cfg["config"]))
        (Path(tmp) / "progress.json").write_text(json.dumps(progress, indent=2))
        ray.train.report(report, checkpoint=ray.train.Checkpoint.from_directory(tmp))


def _log_progress(step: int, metrics: dict[str, float], elapsed: float, t: dict[str, Any]) -> None:
    per_step = elapsed / step
    remaining = (t["max_steps"] - step) * per_step
    if t["max_minutes"] is not None:
        remaining = min(remaining, 60 * t["max_minutes"] - elapsed)
    log.info(
        "step %d/%d loss %.3f nll/token %.3f %s %.0f tok/s lr %.2g elapsed %.0fs ETA %.0fs",
        step, t["max_steps"], metrics["train/loss"], metrics["train/nll_per_token"],
        f"ranking {metrics['train/ranking_loss']:.3f}" if "train/ranking_loss" in metrics else "",
        metrics["train/tokens_per_s"], metrics["train/lr"], elapsed, max(remaining, 0),
    )
