"""Throughput as workers are added on one machine's cores: Ray Train workers, `embed`'s actors and
`prepare`'s Beam workers.

    python benchmarks/scaling.py [--what train embed prepare] [--counts 1 2 4 8] [--cpus 2] [--steps 60]
                                 [--window 10] [--text VERSES.txt] [--copies 4] [--bible-db DB]
                                 [--out DIR] [KEY=VALUE ...]

train  `interlingua train` (benchmarks/train.py's `ray_loop`: the product's driver, Ray Train's
       TorchTrainer, DDP over gloo) on the demo's config with N workers of `--cpus` CPUs (torch
       threads) each. Each worker keeps the demo's token budget, so the global batch grows with N
       (weak scaling, as adding workers to a run does). Checkpoints and evaluation are pushed past
       the measured steps and the token embeddings start random (the LSI start costs time before
       training and changes no step's cost). tokens/s: summed over the workers by the loop's own
       metrics, the median of the windows of `--window` steps, the first window dropped.
embed  `embed_corpus` (the job behind `interlingua embed -o DIR`, Ray Data) with N actors of `--cpus`
       CPUs each over the KJV verses, `--copies` times over (benchmarks/embed.py: the demo's encoder,
       untrained, a BPE model of the verses), end to end into an empty folder: planning, actor start,
       model load, reading, embedding, writing. Median of `--repeats`.

prepare
       the demo's preparation Beam job (`pipelines.prepare.run_prepare`: read, clean, deduplicate, split,
       train the BPE model, encode, write Parquet) over the six Bible versions (`--bible-db`: another
       copy of the database, e.g. one holding only those versions), in process with N worker
       processes (`interlingua prepare --workers N`) and on Beam's DaskRunner against a local
       dask.distributed cluster of N single-threaded worker processes (started before the clock).
       Throughput: input tuples/s of the whole job; every run must write the same files (checked).

Parallel efficiency at N: throughput(N) / (N x throughput(1)). Ray starts once, with every core.
Appends its rows to DIR/scaling.jsonl, then prints a table of every row there and plots them into
DIR/scaling.png (speed-up and efficiency against N): train and embed may run as separate processes.
The dataset needs at least max(counts) Parquet row groups in its train split
(`prepare.output.train_shards`): each worker streams its own share of them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from orchestration.config import load_config  # noqa: E402


def train_rows(args) -> list[dict]:
    import train as train_bench  # benchmarks/train.py (torch, Ray, MLflow: imported only when measured)

    config = load_config(
        args.config,
        [
            f"runtime.cpus_per_worker={args.cpus}",
            "runtime.prefetch_batches=0",
            "runtime.max_failures=0",  # a failure shows at once, not after restarts
            "model.embed_init=random",
            "model.teacher=null",  # the machinery without the demo's teacher: its pass is not what this measures
            *args.overrides,
        ],
    )
    rows = []
    for n in args.counts:
        started = time.perf_counter()
        windows = train_bench.ray_loop(config, args.steps, args.window, workers=n)
        rate = statistics.median(w.tokens_per_s for w in windows)
        rows.append(
            {
                "what": "train",
                "count": n,
                "cpus_each": args.cpus,
                "unit": "tokens/s",
                "throughput": rate,
                "windows": [round(w.tokens_per_s) for w in windows],
                "cores_used": statistics.median(w.cores for w in windows),
                "run_s": time.perf_counter() - started,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def embed_rows(args) -> list[dict]:
    import embed as embed_bench  # benchmarks/embed.py

    work = Path(tempfile.mkdtemp(prefix="scaling-embed-"))
    sentences = embed_bench.verses(args.sentences, args.text) * args.copies
    paths = embed_bench.write_files(sentences, work / "in", args.files)
    model = embed_bench.model_dir(sentences, work / "model")
    rows = []
    for n in args.counts:
        times = [
            embed_bench.on_ray(model, paths, work / "out", n, args.cpus, args.block_rows) for _ in range(args.repeats)
        ]
        rows.append(
            {
                "what": "embed",
                "count": n,
                "cpus_each": args.cpus,
                "unit": "sentences/s",
                "throughput": len(sentences) / statistics.median(times),
                "sentences": len(sentences),
                "runs_s": [round(t, 2) for t in times],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    shutil.rmtree(work)  # this run's own temporary folder
    return rows


def prepare_rows(args) -> list[dict]:
    from distributed import LocalCluster

    from pipelines.prepare import run_prepare
    from pipelines.runners import pipeline_options

    config = load_config(args.config, args.overrides)
    if args.bible_db:
        source = config.prepare.sources[0].model_copy(update={"db_path": str(Path(args.bible_db).resolve())})
        config = config.model_copy(update={"prepare": config.prepare.model_copy(update={"sources": [source]})})
    rows, outputs = [], set()
    work = Path(tempfile.mkdtemp(prefix="scaling-prepare-"))
    for runner in ("in-process", "dask"):
        for n in args.counts:
            cluster = (
                LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
                if runner == "dask"
                else None
            )
            beam_args = ["--runner=DaskRunner", f"--dask_client_address={cluster.scheduler_address}"] if cluster else []
            started = time.perf_counter()
            result = run_prepare(
                config.prepare,
                work / f"{runner}-{n}",
                resolved_config=config.to_dict(),
                force=True,
                options=pipeline_options(beam_args, workers=1 if cluster else n),
            )
            seconds = time.perf_counter() - started
            if cluster:
                cluster.close()
            tuples = result.manifest.counts.tuples.read
            outputs.add(
                json.dumps(
                    sorted(
                        [f.sha256 for s in result.manifest.splits.values() for f in s.files]
                        + [result.manifest.spm.sha256]
                    )
                )
            )
            rows.append(
                {
                    "what": f"prepare ({runner})",
                    "count": n,
                    "cpus_each": 1,
                    "unit": "tuples/s",
                    "throughput": tuples / seconds,
                    "tuples": tuples,
                    "run_s": round(seconds, 2),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    shutil.rmtree(work)  # this run's own temporary folder
    if len(outputs) != 1:
        raise SystemExit(f"the runs wrote {len(outputs)} different datasets: the job is not deterministic")
    return rows


def with_efficiency(rows: list[dict]) -> list[dict]:
    for what in {r["what"] for r in rows}:
        mine = [r for r in rows if r["what"] == what]
        one = next((r for r in mine if r["count"] == 1), None)
        for r in mine:
            r["speedup"] = r["throughput"] / one["throughput"] if one else None
            r["efficiency"] = r["speedup"] / r["count"] if one else None
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| what | workers x CPUs | throughput | speed-up | efficiency |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        speedup = f"{r['speedup']:.2f}x" if r.get("speedup") is not None else "-"
        efficiency = f"{100 * r['efficiency']:.0f} %" if r.get("efficiency") is not None else "-"
        lines.append(
            f"| {r['what']} | {r['count']} x {r['cpus_each']} | {r['throughput']:,.0f} {r['unit']} "
            f"| {speedup} | {efficiency} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = sorted({r["what"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for what in kinds:
        mine = sorted((r for r in rows if r["what"] == what and r.get("speedup") is not None), key=lambda r: r["count"])
        counts = [r["count"] for r in mine]
        axes[0].plot(counts, [r["speedup"] for r in mine], "o-", label=what)
        axes[1].plot(counts, [100 * r["efficiency"] for r in mine], "o-", label=what)
    top = max([r["count"] for r in rows] or [1])
    axes[0].plot([1, top], [1, top], ":", color="grey", label="linear")
    axes[0].set(xlabel="workers / actors", ylabel="speed-up over one", xscale="log", yscale="log")
    axes[1].set(xlabel="workers / actors", ylabel="parallel efficiency %", xscale="log", ylim=(0, 110))
    counts = sorted({r["count"] for r in rows})
    axes[0].set_yticks(counts, labels=[f"{c}x" for c in counts])
    for ax in axes:
        ax.minorticks_off()
        ax.set_xticks(counts, labels=[str(c) for c in counts])
        ax.legend()
    fig.suptitle(f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--what", nargs="+", choices=["train", "embed", "prepare"], default=["train", "embed"])
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--cpus", type=int, default=2, help="CPUs (torch threads) of each worker or actor")
    parser.add_argument("--config", default=str(HERE.parent / "configs" / "bible6-cpu.yaml"))
    parser.add_argument("--steps", type=int, default=60, help="train: steps per run")
    parser.add_argument("--window", type=int, default=10, help="train: steps per measured window")
    parser.add_argument("--text", help="embed: sentences from this file, one per line (default: the Bible database)")
    parser.add_argument("--sentences", type=int, default=31102)
    parser.add_argument(
        "--copies",
        type=int,
        default=4,
        help="embed: the sentences this many times over (at one copy, "
        "31,102 verses take a few seconds and fixed costs dominate)",
    )
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--block-rows", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=1, help="embed: runs per count")
    parser.add_argument("--bible-db", help="prepare: this copy of the Bible database (default: the installed one)")
    parser.add_argument("--out", default=".")
    parser.add_argument("overrides", nargs="*", help="config overrides (train), e.g. dataset_dir=DIR")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    if set(args.what) & {"train", "embed"}:
        import ray

        ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    rows = []
    for what in args.what:
        rows += {"train": train_rows, "embed": embed_rows, "prepare": prepare_rows}[what](args)
    with (out / "scaling.jsonl").open("a") as f:  # the report covers every run recorded in DIR
        f.writelines(json.dumps(r) + "\n" for r in rows)
    rows = with_efficiency([json.loads(line) for line in (out / "scaling.jsonl").read_text().splitlines()])
    print(
        f"\n{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, python {platform.python_version()}, "
        f"load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )
    print(table(rows))
    plot(rows, out / "scaling.png")


if __name__ == "__main__":
    main()
