"""The GPU figures in one call: how busy the training loop keeps the GPU, the demo's quality after a few
minutes, embedding sentences/s.

    python benchmarks/gpu.py all --data DATASET_DIR --out DIR [--before-tree TREE] [--budget-s 520]

Built for a lent GPU machine that has torch but not Ray or MLflow: `benchmarks/gpu_setup.sh` builds
what it lacks and prints the command that runs this there. Every loop here is the product's own
parts (`model.stream` streams, `model.training.train_step`, `make_optimizer`, `scheduled_lr`,
`model.lsi`, `model.inference.embed`, `evaluation.xsim`) driven by a bare loop in one process, as
`benchmarks/train.py`'s bare loop is: Ray Train's worker runs the same step (its overhead is measured
by `benchmarks/train.py`, where Ray is installed).

Stages, each in a new process, each bounded in time, results appended to DIR/gpu.jsonl as they come:

    feed      tokens/s and GPU busy time of the demo's model and a LASER-size one (BLSTM 5 x 512,
              1,024-d), the code before the change (`--before-tree`, a copy of the older tree)
              against now, at the demo's token budget and a larger one. GPU busy: NVML's utilization sampled
              every 0.1 s over the measured window, and the CUDA kernel time over the wall time of a
              profiled window (torch.profiler, whose top operators go to DIR/profile-*.txt)
    quality   the demo's recipe (configs/bible6-cpu.yaml) without its teacher (this loop distils
              nothing) for `--minutes` on the GPU, several token
              budgets and encoder sizes side by side (sharing the GPU), the best dev model's test
              similarity error (the 30 ordered pairs of the test split's 1,000 tuples, exact cosine
              search), as `interlingua evaluate` computes it
    loader    batches/s of the training stream alone (no model), the older tree against this one
    embed     sentences/s of `model.inference.embed` on the GPU for both model sizes
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
DEMO = HERE / "configs" / "bible6-cpu.yaml"
LASER = ["model.encoder_layers=5", "model.encoder_hidden=512", "model.embed_dim=320"]


def _tree(tree: str | None) -> None:
    """Import the product from `tree` (an older copy, for the "before" figures) or this checkout."""
    sys.path.insert(0, str(Path(tree).resolve()) if tree else str(HERE))


def _setup(args, overrides: list[str]):
    import torch

    from core.dataset import load_manifest, split_files
    from model.batching import shard_units
    from model.nmt import MultilingualNMT
    from model.stream import BatchStream
    from model.training import cpu_threads
    from orchestration.config import load_config
    from orchestration.train.builders import model_args, training_paths

    config = load_config(
        args.config or DEMO, [f"dataset_dir={Path(args.data).resolve()}", "runtime.use_gpu=true", *overrides]
    )
    cpu_threads(config.runtime.cpus_per_worker)  # as a training worker does
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    manifest = load_manifest(config.data_dir)
    languages = manifest.languages
    torch.manual_seed(config.train.seed)
    model = MultilingualNMT.build(model_args(config, languages, manifest.spm.vocab_size)).to(device)
    t = config.train
    stream = BatchStream(
        shard_units(split_files(config.data_dir, "train")),
        languages,
        training_paths(t),
        seed=t.seed,
        rank=0,
        world=1,
        max_tokens=t.max_tokens,
        window_tuples=t.window_tuples,
        monolingual=t.monolingual,
    )
    return config, device, model, stream


class Utilization:
    """NVML's GPU utilization (% of time a kernel ran), sampled by a thread every `interval` s."""

    def __init__(self, interval: float = 0.1) -> None:
        self.samples: list[int] = []
        self._stop = threading.Event()
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self._read = lambda: pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
        except Exception as exc:  # no NVML: the profiler's figure stands alone
            print(f"NVML unavailable: {exc}", file=sys.stderr)
            return
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.samples.append(self._read())

    def stop(self) -> float | None:
        self._stop.set()
        return statistics.mean(self.samples) if self.samples else None


def feed(args) -> dict:
    """One variant's tokens/s, NVML busy % and profiled kernel-busy fraction."""
    import torch

    overrides = [f"train.max_tokens={args.max_tokens}", *(LASER if args.model == "laser" else []), *args.set]
    config, device, model, stream = _setup(args, overrides)
    from model.training import input_tokens, scheduled_lr, train_step
    from orchestration.train.builders import schedule_args

    t = config.train
    if args.before:  # the optimizer and stream as the older loop built them
        optimizer = torch.optim.AdamW(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
    else:
        from model.prefetch import prefetched
        from model.training import make_optimizer

        optimizer = make_optimizer(model, lr=t.lr, weight_decay=t.weight_decay, device=device)
        stream = prefetched(stream, args.prefetch, pin_memory=device.type == "cuda")
    weight, sums = config.model.ranking_weight, {"steps": 0, "tokens": 0}
    loss_sum = torch.zeros((), device=device)

    def run(seconds: float | None = None, steps: int | None = None) -> float:
        nonlocal loss_sum
        start, n = time.perf_counter(), 0
        while (seconds is None or time.perf_counter() - start < seconds) and (steps is None or n < steps):
            batch = next(stream)
            lr = scheduled_lr(sums["steps"], 0.0, **schedule_args(t))
            for group in optimizer.param_groups:
                group["lr"] = lr if lr is not None else group["lr"]
            out = train_step(
                model,
                optimizer,
                batch.sources,
                batch.targets,
                ranking_weight=weight,
                grad_clip=t.grad_clip,
                device=device,
            )
            loss_sum = loss_sum + out.loss.detach()  # read once a window, as the loop does
            sums["steps"] += 1
            sums["tokens"] += input_tokens(batch.sources, batch.targets, weight)
            n += 1
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    run(steps=1)  # waits for the first batch (a prefetching worker process starts, the first window is read)
    run(seconds=args.warm_s)
    steps0, tokens0 = sums["steps"], sums["tokens"]
    busy = Utilization()
    wall = run(seconds=args.measure_s)
    nvml = busy.stop()
    result = {
        "stage": "feed",
        "model": args.model,
        "code": args.label or ("before" if args.before else "after"),
        "max_tokens": args.max_tokens,
        "prefetch": 0 if args.before else args.prefetch,
        "steps": sums["steps"] - steps0,
        "seconds": wall,
        "tokens_per_s": (sums["tokens"] - tokens0) / wall,
        "nvml_busy_pct": nvml,
        "loss": float(loss_sum) / max(sums["steps"], 1),
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None,
    }
    if device.type == "cuda":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            wall = run(steps=args.profile_steps)
        from torch.autograd import DeviceType

        intervals = sorted(
            (e.time_range.start, e.time_range.end)
            for e in prof.events()
            if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
        )
        busy_us, end = 0.0, float("-inf")
        for a, b in intervals:  # their union: overlapping kernels count once
            busy_us += max(0.0, b - max(a, end))
            end = max(end, b)
        result["profiled_kernel_busy_pct"] = 100 * busy_us / 1e6 / wall
        averages = prof.key_averages()
        result["profiled_steps"] = args.profile_steps
        if args.out:
            with (Path(args.out) / "profiles.txt").open("a") as f:
                f.write(
                    f"\n## {args.model} {result['code']} max_tokens={args.max_tokens} prefetch={result['prefetch']}, "
                    f"{args.profile_steps} steps\n"
                )
                f.write(averages.table(sort_by="self_cpu_time_total", row_limit=20) + "\n")
                f.write(averages.table(sort_by="self_cuda_time_total", row_limit=20) + "\n")
    if hasattr(stream, "close"):
        stream.close()
    return result


def loader(args) -> dict:
    """Batches/s and tokens/s of the training stream alone (one process, no model): reading the shards,
    planning each window and padding its batches, as the prefetching worker process does."""
    from model.training import input_tokens

    config, _, _, stream = _setup(args, [f"train.max_tokens={args.max_tokens}"])
    next(stream)
    start, batches, tokens, windows = time.perf_counter(), 0, 0, set()
    while time.perf_counter() - start < args.measure_s:
        batch = next(stream)
        batches += 1
        tokens += input_tokens(batch.sources, batch.targets, config.model.ranking_weight)
        windows.add((stream.position.epoch, stream.position.window))
    wall = time.perf_counter() - start
    return {
        "stage": "loader",
        "code": args.label or "now",
        "max_tokens": args.max_tokens,
        "batches": batches,
        "windows": len(windows),
        "seconds": wall,
        "batches_per_s": batches / wall,
        "tokens_per_s": tokens / wall,
    }


def test_error(model, data_dir: str, languages: list[str], device, split: str = "test") -> dict:
    """The average similarity error over every ordered pair of the split's complete tuples, and per pair
    (`evaluation.xsim.error_matrix`: exact cosine search, as the dev error and `interlingua evaluate`)."""
    from evaluation.xsim import average_error, error_matrix
    from model.batching import ParallelCorpus
    from model.inference import embed_rows

    corpus = ParallelCorpus.read(data_dir, split, languages)
    rows = corpus.complete_rows()
    pairs = error_matrix(embed_rows(model, corpus, rows, device=device))
    return {
        "sentences": len(rows),
        "error": average_error(pairs),
        "pairs": {f"{p}-{q}": e for (p, q), e in pairs.items()},
    }


def quality(args) -> dict:
    """The demo's recipe with the overrides for `--minutes`: LSI start, cosine schedule over the time
    budget, dev error every `eval_every_steps`, the best dev model's test error (as `set_up`,
    `evaluate_dev` and the exported best model of `orchestration.train.loop`)."""
    import torch

    from evaluation.xsim import average_error, error_matrix
    from model.batching import ParallelCorpus, sample_corpus
    from model.inference import embed_rows
    from model.lsi import cooccurrence_matrix, lsi_embeddings
    from model.prefetch import prefetched
    from model.training import input_tokens, make_optimizer, scheduled_lr, train_step
    from orchestration.train.builders import schedule_args

    overrides = [f"train.max_minutes={args.minutes}", *args.set]
    config, device, model, stream = _setup(args, overrides)
    t, languages = config.train, stream.languages
    started = time.perf_counter()
    sample = sample_corpus(stream.units, languages, t.sample_tuples)
    matrix = cooccurrence_matrix(
        [sample.values[lang] for lang in languages],
        [sample.lengths[lang] for lang in languages],
        vocab_size=model.vocab_size,
    )
    model.set_token_embeddings(torch.from_numpy(lsi_embeddings(matrix, dim=model.embed_dim, seed=t.seed)).to(device))
    lsi_s = time.perf_counter() - started
    optimizer = make_optimizer(model, lr=t.lr, weight_decay=t.weight_decay, device=device)
    stream = prefetched(stream, 8, pin_memory=device.type == "cuda")
    dev = ParallelCorpus.read(config.data_dir, "dev", languages)
    dev_rows = dev.complete_rows()[: t.dev_max_sentences]
    best, best_state, curve, bad, step, tokens = None, None, [], 0, 0, 0
    started = time.perf_counter()
    while True:
        elapsed = time.perf_counter() - started
        lr = scheduled_lr(step, elapsed, **schedule_args(t))
        if lr is not None:
            for group in optimizer.param_groups:
                group["lr"] = lr
        batch = next(stream)
        train_step(
            model,
            optimizer,
            batch.sources,
            batch.targets,
            ranking_weight=config.model.ranking_weight,
            grad_clip=t.grad_clip,
            device=device,
        )
        tokens += input_tokens(batch.sources, batch.targets, config.model.ranking_weight)
        step += 1
        over = elapsed >= 60 * t.max_minutes or step >= t.max_steps
        if step % t.eval_every_steps == 0 or over:
            error = average_error(error_matrix(embed_rows(model, dev, dev_rows, device=device)))
            curve.append({"step": step, "minutes": round((time.perf_counter() - started) / 60, 2), "dev": error})
            if best is None or error < best:
                best, best_state, bad = error, copy.deepcopy(model.state_dict()), 0
            else:
                bad += 1
            patience = t.early_stop_patience_evals
            if over or (patience is not None and bad >= patience):
                break
    train_s = time.perf_counter() - started
    stream.close()
    model.load_state_dict(best_state)
    result = {
        "stage": "quality",
        "overrides": args.set,
        "minutes": args.minutes,
        "train_s": train_s,
        "lsi_s": lsi_s,
        "steps": step,
        "tokens_per_s": tokens / train_s,
        "dev_best": best,
        "dev_curve": curve,
        "test": test_error(model, config.data_dir, languages, device),
    }
    return result


def embed_speed(args) -> dict:
    """Sentences/s of `model.inference.embed` on the GPU: the dev and test sentences of every language,
    `--repeat` times over, both model sizes (untrained weights: the speed does not depend on them)."""
    import numpy as np
    import torch

    from model.batching import ParallelCorpus
    from model.inference import embed

    out = {"stage": "embed", "rows": []}
    for name, overrides in (("demo", []), ("laser", LASER)):
        config, device, model, stream = _setup(args, overrides)
        sentences = []
        for split in ("dev", "test"):
            corpus = ParallelCorpus.read(config.data_dir, split, stream.languages)
            sentences += [
                corpus.ids(lang, r) for lang in stream.languages for r in range(corpus.size) if corpus.lengths[lang][r]
            ]
        sentences = (sentences * args.repeat)[: args.limit]
        for max_tokens in (8000, 32000):
            embed(model, sentences[:2000], "en", device=device, autocast=True, max_tokens=max_tokens)  # warm-up
            times = []
            for _ in range(3):
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                vectors = embed(model, sentences, "en", device=device, autocast=True, max_tokens=max_tokens)
                times.append(time.perf_counter() - start)
            assert np.isfinite(vectors).all()
            out["rows"].append(
                {
                    "model": name,
                    "max_tokens": max_tokens,
                    "sentences": len(sentences),
                    "sentences_per_s": len(sentences) / statistics.median(times),
                    "mean_tokens": float(np.mean([len(s) + 1 for s in sentences])),
                }
            )
    return out


# --- the whole call ---------------------------------------------------------------------------------

FEED = [  # model:code:max_tokens:prefetch, the most wanted first: a later one is left out when time is short.
    # code: before (the older tree and its loop: no prefetching, plain AdamW), tree (the older tree with
    # this loop), now (this checkout)
    "demo:before:1500:0",
    "demo:now:12000:8",
    "laser:before:12000:0",
    "laser:now:12000:8",
    "demo:now:1500:8",
    "demo:now:1500:0",
]
QUALITY = [  # overrides of the demo's recipe, trained side by side
    [],
    ["train.max_tokens=6000"],
    ["train.max_tokens=6000", "model.encoder_hidden=512"],
    ["train.max_tokens=3000", "model.encoder_hidden=256"],
]


def run_all(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "gpu.jsonl"
    deadline = time.monotonic() + args.budget_s
    script = [sys.executable, str(Path(__file__).resolve())]
    environment(out / "env.txt")
    common = ["--data", args.data, "--out", str(out)]

    def stage(argv: list[str], timeout: float, tree: str | None = None):
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        cmd = script + argv + common + (["--tree", tree] if tree else [])
        return subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=open(out / "stages.log", "a"), text=True
        ), timeout

    def collect(procs) -> None:
        for proc, timeout in procs:
            try:
                stdout, _ = proc.communicate(timeout=max(1.0, min(timeout, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                proc.kill()
                stdout, _ = proc.communicate()
                print(f"timed out: {proc.args[2:5]}", flush=True)
            for line in stdout.splitlines():
                if line.startswith("{"):
                    with results.open("a") as f:
                        f.write(line + "\n")
                    print(line[:400], flush=True)
            if proc.returncode:
                print(f"failed ({proc.returncode}): {' '.join(proc.args[2:])}", flush=True)

    stages = set(args.stages.split(","))
    reserve = (
        (args.minutes * 60 + 90 if "quality" in stages else 0)
        + (45 if "embed" in stages else 0)
        + (2 * (2 * args.measure_s + 15) if "loader" in stages else 0)
    )
    for variant in (args.feed or FEED) if "feed" in stages else []:
        model, code, max_tokens, ahead = variant.split(":")
        if code != "now" and not args.before_tree:
            continue
        left = deadline - time.monotonic() - reserve
        if left < args.warm_s + args.measure_s + 20:
            print(f"feed: no time left for {variant}", flush=True)
            continue
        collect(
            [
                stage(
                    [
                        "feed",
                        "--model",
                        model,
                        "--max-tokens",
                        max_tokens,
                        "--prefetch",
                        ahead,
                        "--label",
                        code,
                        "--warm-s",
                        str(args.warm_s),
                        "--measure-s",
                        str(args.measure_s),
                    ]
                    + (["--before"] if code == "before" else []),
                    min(left, 120),
                    args.before_tree if code != "now" else None,
                )
            ]
        )
    minutes = min(args.minutes, (deadline - time.monotonic() - 90 - 45) / 60)
    if "quality" in stages and minutes >= 0.5:
        collect(
            [
                stage(
                    ["quality", "--minutes", f"{minutes:.2f}", *[x for s in overrides for x in ("--set", s)]],
                    minutes * 60 + 75,
                )
                for overrides in QUALITY
            ]
        )
    elif "quality" in stages:
        print("quality: no time left", flush=True)
    if "loader" in stages:  # the stream alone, older tree against this one
        for code in (["tree"] if args.before_tree else []) + ["now"]:
            collect(
                [
                    stage(
                        ["loader", "--max-tokens", "12000", "--measure-s", str(2 * args.measure_s), "--label", code],
                        60,
                        args.before_tree if code != "now" else None,
                    )
                ]
            )
    if "embed" in stages:
        collect([stage(["embed", "--repeat", str(args.repeat)], max(10.0, deadline - time.monotonic()))])
    summary(results)


def environment(path: Path) -> None:
    """The machine and versions the figures come from."""
    import importlib.metadata
    import platform

    import torch

    lines = [
        f"date {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        f"commit {os.environ.get('GIT_COMMIT', '?')}",
        f"python {platform.python_version()}",
        f"torch {torch.__version__} cuda {torch.version.cuda} cudnn {torch.backends.cudnn.version()}",
        f"cpus {os.cpu_count()}",
        f"load {os.getloadavg()}",
    ]
    for name in ("numpy", "pyarrow", "faiss-cpu", "pydantic", "scikit-learn"):
        try:
            lines.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            lines.append(f"{name} missing")
    if torch.cuda.is_available():
        lines.append(f"gpu {torch.cuda.get_device_name(0)}")
        smi = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,memory.total,clocks.max.sm,utilization.gpu",
                "--format=csv",
            ],
            capture_output=True,
            text=True,
        )
        lines.append(smi.stdout.strip())
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


def summary(results: Path) -> None:
    rows = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    print("\nmodel  code    budget prefetch  tokens/s  NVML busy %  kernel busy %  peak GiB")
    for r in (r for r in rows if r["stage"] == "feed"):
        print(
            f"{r['model']:<6} {r['code']:<7}{r['max_tokens']:>7}{r['prefetch']:>9}{r['tokens_per_s']:>10,.0f}"
            f"{r['nvml_busy_pct'] or float('nan'):>13.1f}{r.get('profiled_kernel_busy_pct', float('nan')):>15.1f}"
            f"{r['peak_gib'] or float('nan'):>10.1f}"
        )
    for r in (r for r in rows if r["stage"] == "loader"):
        print(
            f"loader {r['code']:<5} budget {r['max_tokens']}: {r['batches_per_s']:,.1f} batches/s, "
            f"{r['tokens_per_s']:,.0f} tokens/s ({r['windows']} windows in {r['seconds']:.0f} s)"
        )
    for r in (r for r in rows if r["stage"] == "quality"):
        print(
            f"quality {' '.join(r['overrides']) or 'demo recipe'}: {r['steps']} steps in {r['train_s'] / 60:.1f} min,"
            f" {r['tokens_per_s']:,.0f} tok/s, dev {100 * r['dev_best']:.2f} %, test {100 * r['test']['error']:.2f} %"
        )
    for r in (r for r in rows if r["stage"] == "embed"):
        for row in r["rows"]:
            print(f"embed {row['model']} max_tokens {row['max_tokens']}: {row['sentences_per_s']:,.0f} sentences/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=["all", "feed", "loader", "quality", "embed", "summary"])
    parser.add_argument("--data", required=True, help="the prepared dataset of configs/bible6-cpu.yaml (or --config's)")
    parser.add_argument("--config", help="feed, loader, quality: this run config instead of configs/bible6-cpu.yaml")
    parser.add_argument("--out", default="")
    parser.add_argument("--tree", help="import the product from this copy (the code before a change)")
    parser.add_argument("--before-tree", help="all: a copy of the older tree, for the 'before' figures")
    parser.add_argument("--before", action="store_true", help="feed: the older loop's optimizer and stream")
    parser.add_argument("--label", help="feed: the name of the code measured (default: before or after)")
    parser.add_argument("--stages", default="feed,quality,embed", help="all: the stages to run (comma-separated)")
    parser.add_argument(
        "--feed",
        action="append",
        help="all: a feed variant model:code:max_tokens:prefetch "
        "(code: before, tree or now; see FEED), repeatable; default: FEED",
    )
    parser.add_argument("--budget-s", type=float, default=520)
    parser.add_argument("--model", choices=["demo", "laser"], default="demo")
    parser.add_argument("--max-tokens", type=int, default=1500)
    parser.add_argument("--prefetch", type=int, default=8)
    parser.add_argument("--warm-s", type=float, default=6)
    parser.add_argument("--measure-s", type=float, default=10)
    parser.add_argument("--profile-steps", type=int, default=20)
    parser.add_argument("--minutes", type=float, default=4.0)
    parser.add_argument("--set", action="append", default=[], help="a config override (feed, quality)")
    parser.add_argument("--repeat", type=int, default=3, help="embed: the dev and test sentences this many times")
    parser.add_argument("--limit", type=int, help="embed: at most this many sentences (a dry run on a CPU)")
    args = parser.parse_args()
    if args.stage == "summary":
        return summary(Path(args.out) / "gpu.jsonl")
    if args.stage == "all":
        return run_all(args)
    _tree(args.tree)
    result = {"feed": feed, "loader": loader, "quality": quality, "embed": embed_speed}[args.stage](args)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
