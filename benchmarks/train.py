"""Tokens/s of the Ray Train loop against a bare single-process PyTorch loop, same model and batches.

    .venv/bin/python benchmarks/train.py [--steps 60] [--repeats 5] [KEY=VALUE ...]

Both loops run the same `MultilingualNMT`, the same batch plan (seed,
token budget, paths) and the same step (forward, backward, clip, Adam) with
the same torch threads and the same allocator settings (`runtime.worker_env`,
which this script re-executes itself under). The Ray loop is `interlingua
train` itself with one worker (checkpoints and evaluation pushed past the
measured steps); its tokens/s and CPU use come from its own per-window
metrics in MLflow. Windows of `--window` steps, the first one (warm-up)
dropped. With `runtime.use_gpu=true` both loops run on the GPU under bf16
autocast. Each repeat runs the bare loop, the Ray loop and (unless
`--no-compare-output`) the bare loop with the other output layer (full vs
adaptive softmax) back to back, so the per-repeat ratios compare runs a
minute apart; the machine's speed drifts more than that over the whole
benchmark. Each bare loop runs in a new process, as each Ray run gets a new
worker: no loop finds caches that an earlier repeat warmed.

Besides tokens/s it reports where the CPUs went, per window: the cores the
training process used (its CPU time per second), the cores everything else on
the machine used (/proc/stat, Linux), and tokens per CPU-second of the
training process. Needs the prepared dataset of the config (prepared when
missing).
"""

from __future__ import annotations

import argparse
import bisect
import logging
import math
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.worker_env import same_env_as_workers  # noqa: E402
from core.dataset import load_manifest, split_files  # noqa: E402
from model.batching import sample_corpus, shard_units  # noqa: E402
from model.nmt import MultilingualNMT  # noqa: E402
from model.stream import BatchStream
from model.training import cpu_threads, input_tokens, make_optimizer, train_step  # noqa: E402
from orchestration.adapters import tracking  # noqa: E402
from orchestration.config import Config, load_config  # noqa: E402
from orchestration.train.builders import model_args, training_paths  # noqa: E402
from orchestration.train.driver import train  # noqa: E402


@dataclass
class Window:
    """One measured window of a loop."""

    tokens_per_s: float
    cores: float  # CPU-seconds of the training process per second
    start: float  # wall clock, seconds since the epoch
    end: float


class MachineCpu:
    """Busy CPU-seconds of the whole machine over time, sampled from /proc/stat by a thread (Linux)."""

    def __init__(self, interval: float = 0.25) -> None:
        self.samples: list[tuple[float, float]] = []
        self.available = Path("/proc/stat").is_file()
        self._tick = os.sysconf("SC_CLK_TCK") if self.available else 1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        if self.available:
            self._thread.start()

    def _busy(self) -> float:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
        return (user + nice + system + irq + softirq) / self._tick

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.samples.append((time.time(), self._busy()))

    def cores(self, start: float, end: float) -> float:
        """Cores busy between two wall-clock times (interpolated between samples); nan without /proc."""
        samples = self.samples[:]  # the thread appends while this reads
        if not samples or start < samples[0][0] or end > samples[-1][0] or end <= start:
            return float("nan")

        def at(t: float) -> float:
            i = max(1, bisect.bisect_left(samples, t, key=lambda s: s[0]))
            (t0, b0), (t1, b1) = samples[i - 1], samples[i]
            return b0 + (b1 - b0) * (t - t0) / max(t1 - t0, 1e-9)

        return (at(end) - at(start)) / (end - start)

    def close(self) -> None:
        self._stop.set()


def fresh_bare_loop(config: Config, steps: int, window: int) -> tuple[list[Window], float]:
    """`bare_loop` in a new process, as every Ray run gets a new worker process.

    Run in this process, the bare loop of a later repeat would find the
    allocator pools and per-shape kernel plans (cuDNN, oneDNN) of the earlier
    ones already warm (same seed, so the same batch shapes), which a new Ray
    worker never does. On an H100 the in-process bare loop ran 26 % faster in
    its third repeat than in its first while the Ray runs beside it did not.
    """
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(bare_loop, config, steps, window).result()


def bare_loop(config: Config, steps: int, window: int) -> tuple[list[Window], float]:
    """The windows of a plain PyTorch loop (the first one dropped), on the GPU with bf16 autocast where
    `runtime.use_gpu` asks for it, as the Ray workers do; and the peak GPU memory in GiB (nan on CPU)."""
    cpu_threads(config.runtime.cpus_per_worker)  # as a training worker does
    device = torch.device("cuda" if config.runtime.use_gpu else "cpu")
    manifest = load_manifest(config.data_dir)
    languages = config.train.languages or manifest.languages
    units = shard_units(split_files(config.data_dir, "train"))
    torch.manual_seed(config.train.seed)
    model = MultilingualNMT.build(model_args(config, languages, manifest.spm.vocab_size))
    if model.output == "adaptive":
        sample = sample_corpus(units, languages, config.train.sample_tuples)
        model.set_token_order(torch.from_numpy(sample.token_counts(model.vocab_size)))
    model.to(device)
    optimizer = make_optimizer(model, lr=config.train.lr, weight_decay=config.train.weight_decay, device=device)
    stream = BatchStream(
        units,
        languages,
        training_paths(config.train),
        seed=config.train.seed,
        rank=0,
        world=1,
        max_tokens=config.train.max_tokens,
        window_tuples=config.train.window_tuples,
        monolingual=config.train.monolingual,
    )
    windows, tokens = [], 0
    start, cpu_start, wall_start = time.perf_counter(), time.process_time(), time.time()
    for step in range(1, steps + 1):
        batch = next(stream)
        sources, targets = batch.sources, batch.targets
        out = train_step(
            model,
            optimizer,
            sources,
            targets,
            ranking_weight=config.model.ranking_weight,
            grad_clip=config.train.grad_clip,
            device=device,
        )
        tokens += input_tokens(sources, targets, config.model.ranking_weight)  # as the Ray loop counts them
        tokens += sum(out.tokens.values())  # on the model's device, read once a window as the loop does
        if step % window == 0:
            tokens = int(tokens)
            now, cpu, wall = time.perf_counter(), time.process_time(), time.time()
            windows.append(Window(tokens / (now - start), (cpu - cpu_start) / (now - start), wall_start, wall))
            tokens, start, cpu_start, wall_start = 0, now, cpu, wall
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    return windows[1:], peak


def ray_loop(config: Config, steps: int, window: int, workers: int = 1) -> list[Window]:
    """The windows of `interlingua train` with `workers` workers, from its MLflow metrics (the first one
    dropped; tokens/s summed over the workers)."""
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        run = config.model_copy(
            update={
                "run_dir": str(Path(tmp) / "run"),
                "dataset_dir": str(Path(config.data_dir).resolve()),
                "tracking": config.tracking.model_copy(update={"uri": f"sqlite:///{tmp}/mlflow.db"}),
                "train": config.train.model_copy(
                    update={"max_steps": steps, "max_minutes": None, "eval_every_steps": steps + 1}
                ),
                "runtime": config.runtime.model_copy(
                    update={"num_workers": workers, "log_every_steps": window, "checkpoint_every_steps": steps + 1}
                ),
            }
        )
        result = train(run)
        rates = sorted(tracking.metric_series(run.tracking.uri, result.run_id, "train/tokens_per_s"))
        cores = dict(tracking.metric_history(run.tracking.uri, result.run_id, "train/cpu_cores"))
    # a window ends when its metrics are logged and starts where the previous one ended
    return [
        Window(rate, cores[step], started, logged) for (_, _, started), (step, rate, logged) in zip(rates, rates[1:])
    ]


def median(values: list[float]) -> float:
    """Median of the known values (nan where none is known, e.g. without /proc/stat)."""
    known = [v for v in values if not math.isnan(v)]
    return statistics.median(known) if known else float("nan")


def _summary(name: str, windows: list[Window], machine: MachineCpu, base: list[Window] | None) -> str:
    rate = median([w.tokens_per_s for w in windows])
    cores = median([w.cores for w in windows])
    other = median([machine.cores(w.start, w.end) - w.cores for w in windows])
    per_cpu = median([w.tokens_per_s / w.cores for w in windows])
    base_rate = median([w.tokens_per_s for w in base]) if base else rate
    base_cpu = median([w.tokens_per_s / w.cores for w in base]) if base else per_cpu
    return (
        f"{name:<34}{rate:>10,.0f}{rate / base_rate:>7.2f}{cores:>8.2f}{other:>8.2f}"
        f"{per_cpu:>11,.0f}{per_cpu / base_cpu:>7.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/bible6-cpu.yaml")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--compare-output",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time the bare loop with the other output layer (full vs adaptive softmax)",
    )
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # the machinery without the demo's teacher (its pass and distillation are not what this measures)
    config = load_config(args.config, ["model.teacher=null", *args.overrides])
    same_env_as_workers(config)  # the bare loop under the Ray worker's allocator settings: the ratio is Ray's alone
    if not (Path(config.data_dir) / "manifest.json").is_file():
        from pipelines.prepare import run_prepare
        from pipelines.runners import pipeline_options

        run_prepare(config.prepare, config.data_dir, options=pipeline_options([]), resolved_config=config.to_dict())

    import ray

    output = config.model.output
    other_output = "softmax" if output == "adaptive" else "adaptive"
    flipped = config.model_copy(update={"model": config.model.model_copy(update={"output": other_output})})
    machine = MachineCpu()
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    bare: list[list[Window]] = []
    rayed: list[list[Window]] = []
    other: list[list[Window]] = []
    peaks: list[float] = []
    for repeat in range(args.repeats):  # back to back, so the machine's drift hits all three alike
        windows, peak = fresh_bare_loop(config, args.steps, args.window)
        bare.append(windows)
        peaks.append(peak)
        rayed.append(ray_loop(config, args.steps, args.window))
        if args.compare_output:
            other.append(fresh_bare_loop(flipped, args.steps, args.window)[0])
        print(
            f"repeat {repeat + 1}/{args.repeats}: tokens/s bare {median([w.tokens_per_s for w in bare[-1]]):,.0f}, "
            f"Ray {median([w.tokens_per_s for w in rayed[-1]]):,.0f}"
            + (f", bare {other_output} {median([w.tokens_per_s for w in other[-1]]):,.0f}" if other else ""),
            flush=True,
        )
    ray.shutdown()
    machine.close()

    def flat(runs: list[list[Window]]) -> list[Window]:
        return [w for run in runs for w in run]

    def paired(runs: list[list[Window]], bases: list[list[Window]]) -> list[float]:
        return [
            median([w.tokens_per_s for w in run]) / median([w.tokens_per_s for w in base])
            for run, base in zip(runs, bases)
        ]

    print(
        f"\nconfig {args.config} {' '.join(args.overrides)}; {args.steps} steps x {args.repeats} repeats, "
        f"windows of {args.window} steps (first dropped), {config.runtime.cpus_per_worker} torch threads, "
        f"{os.cpu_count()} CPUs; medians over windows"
    )
    print(f"{'loop':<34}{'tokens/s':>10}{'ratio':>7}{'cores':>8}{'others':>8}{'tok/CPU-s':>11}{'ratio':>7}")
    print(_summary("bare PyTorch, 1 process", flat(bare), machine, None))
    print(_summary("Ray Train TorchTrainer, 1 worker", flat(rayed), machine, flat(bare)))
    ray_ratios = paired(rayed, bare)
    print(f"Ray / bare per repeat: {' '.join(f'{r:.2f}' for r in ray_ratios)}; median {median(ray_ratios):.2f}")
    print(f"Ray overhead: {100 * (1 - median(ray_ratios)):.1f}% (median of the per-repeat ratios; target <= 10%)")
    if other:
        softmax, adaptive = (bare, other) if output == "softmax" else (other, bare)
        print(_summary("bare, full softmax", flat(softmax), machine, None))
        print(_summary("bare, adaptive softmax", flat(adaptive), machine, flat(softmax)))
        adaptive_ratios = paired(adaptive, softmax)
        print(
            f"adaptive / full softmax per repeat: {' '.join(f'{r:.2f}' for r in adaptive_ratios)}; "
            f"median {median(adaptive_ratios):.2f}"
        )
    if config.runtime.use_gpu:
        print(f"GPU {torch.cuda.get_device_name()}: peak memory of the bare loop {max(peaks):.2f} GiB (bf16 autocast)")
    spread = {name: [w.tokens_per_s for w in flat(runs)] for name, runs in [("bare", bare), ("ray", rayed)]}
    print("window range (min, max):", {k: (round(min(v)), round(max(v))) for k, v in spread.items() if v})
    print(
        "cores: CPU-seconds per second of the training process; others: of every other process "
        "(Ray's own processes, this script, the system)"
    )


if __name__ == "__main__":
    main()
