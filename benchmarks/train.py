"""Tokens/s of the Ray Train loop against a bare single-process PyTorch loop, same model and batches.

    .venv/bin/python benchmarks/train.py [--steps 60] [--repeats 3] [KEY=VALUE ...]

Both loops run the same `MultilingualNMT`, the same batch plan (seed,
token budget, paths) and the same step (forward, backward, clip, Adam) with
the same torch threads and the same allocator settings (`train.worker_env`,
which this script re-executes itself under). The Ray loop is `interlingua train` itself with one
worker (checkpoints and evaluation pushed past the measured steps); its
tokens/s comes from its own per-window metric in MLflow. Windows of
`--window` steps, the first one (warm-up) dropped; medians over windows
and repeats. Then the bare loop with the full softmax against the adaptive
softmax. Needs the prepared dataset of the config (prepared when missing).
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from model.nmt import MultilingualNMT  # noqa: E402
from orchestration import tracking  # noqa: E402
from orchestration.config import Config, load_config  # noqa: E402
from orchestration.corpus import ParallelCorpus, batch_stream  # noqa: E402
from orchestration.recipe import _paths  # noqa: E402
from orchestration.train import model_args, train  # noqa: E402
from pipelines.dataset import load_manifest, split_files  # noqa: E402


def bare_loop(config: Config, steps: int, window: int) -> list[float]:
    """Tokens/s of each window of a plain PyTorch loop (the first window dropped)."""
    torch.set_num_threads(config.train.cpus_per_worker)
    manifest = load_manifest(config.data_dir)
    languages = config.train.languages or manifest["languages"]
    corpus = ParallelCorpus.read(split_files(config.data_dir, "train"), languages)
    torch.manual_seed(config.train.seed)
    model = MultilingualNMT(**model_args(config, languages, manifest["spm"]["vocab_size"]))
    if model.args["output"] == "adaptive":
        model.set_token_order(torch.from_numpy(corpus.token_counts(model.args["vocab_size"])))
    optimizer = torch.optim.Adam(model.parameters(), lr=config.train.lr)
    stream = batch_stream(corpus, _paths(config.train.model_dump()), seed=config.train.seed, rank=0, world=1,
                          max_tokens=config.train.max_tokens, monolingual=config.train.monolingual)
    rates, tokens, start = [], 0, time.perf_counter()
    for step in range(1, steps + 1):
        _, signature, rows = next(stream)
        sources, targets = corpus.batch(signature, rows)
        out = model(sources, targets, ranking_weight=config.model.ranking_weight)
        optimizer.zero_grad(set_to_none=True)
        out["loss"].backward()
        if config.train.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.train.grad_clip)
        optimizer.step()
        tokens += sum(int(lens.sum()) for _, lens in sources.values())
        tokens += sum(int(n) for n in out["tokens"].values())
        if step % window == 0:
            now = time.perf_counter()
            rates.append(tokens / (now - start))
            tokens, start = 0, now
    return rates[1:]


def ray_loop(config: Config, steps: int, window: int) -> list[float]:
    """Tokens/s of each window of `interlingua train` with one worker (the first window dropped)."""
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        run = config.model_copy(update={
            "run_dir": str(Path(tmp) / "run"),
            "dataset_dir": str(config.data_dir.resolve()),
            "tracking": config.tracking.model_copy(update={"uri": f"sqlite:///{tmp}/mlflow.db"}),
            "train": config.train.model_copy(update={
                "max_steps": steps, "max_minutes": None, "num_workers": 1, "log_every_steps": window,
                "eval_every_steps": steps + 1, "checkpoint_every_steps": steps + 1,
            }),
        })
        result = train(run)
        history = tracking.metric_history(run.tracking.uri, result.run_id, "train/tokens_per_s")
    return [rate for _, rate in sorted(history)][1:]


def _same_env_as_workers(config: Config) -> None:
    """Re-run this process with the Ray workers' environment (`train.worker_env`, malloc settings).

    The bare loop then runs under the same allocator settings as the Ray
    worker, so the ratio measures Ray alone. glibc reads them at start-up only.
    """
    missing = {k: v for k, v in config.train.worker_env.items() if os.environ.get(k) != v}
    if missing:
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **missing})


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/bible6-cpu.yaml")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    config = load_config(args.config, args.overrides)
    _same_env_as_workers(config)
    if not (config.data_dir / "manifest.json").is_file():
        from pipelines.prepare import pipeline_options, run_prepare

        run_prepare(config.prepare, config.data_dir, options=pipeline_options([]), resolved_config=config.to_dict())

    import ray

    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    bare, rayed = [], []
    for _ in range(args.repeats):  # interleaved, so drift hits both alike
        bare += bare_loop(config, args.steps, args.window)
        rayed += ray_loop(config, args.steps, args.window)
    ray.shutdown()
    softmax_cfg = config.model_copy(update={"model": config.model.model_copy(update={"output": "softmax"})})
    adaptive_cfg = config.model_copy(update={"model": config.model.model_copy(update={"output": "adaptive"})})
    softmax, adaptive = [], []
    for _ in range(args.repeats):
        softmax += bare_loop(softmax_cfg, args.steps, args.window)
        adaptive += bare_loop(adaptive_cfg, args.steps, args.window)

    b, r = median(bare), median(rayed)
    print(f"config {args.config} {' '.join(args.overrides)}; {args.steps} steps x {args.repeats} repeats, "
          f"windows of {args.window} steps, {config.train.cpus_per_worker} torch threads; medians")
    print(f"{'loop':<34}{'tokens/s':>10}{'ratio':>8}")
    print(f"{'bare PyTorch, 1 process':<34}{b:>10,.0f}{1.0:>8.2f}")
    print(f"{'Ray Train TorchTrainer, 1 worker':<34}{r:>10,.0f}{r / b:>8.2f}")
    print(f"Ray overhead: {100 * (1 - r / b):.1f}% (target <= 10%)")
    s, a = median(softmax), median(adaptive)
    print(f"{'bare, full softmax':<34}{s:>10,.0f}{1.0:>8.2f}")
    print(f"{'bare, adaptive softmax':<34}{a:>10,.0f}{a / s:>8.2f}")
    spread = {name: (min(v), max(v)) for name, v in [("bare", bare), ("ray", rayed)] if v}
    print("window range (min, max):", {k: (round(lo), round(hi)) for k, (lo, hi) in spread.items()})


if __name__ == "__main__":
    main()
