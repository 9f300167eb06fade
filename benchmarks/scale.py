"""Memory and speed as the corpus grows: the streaming training and evaluation at 1x, 4x and 16x.

    .venv/bin/python benchmarks/scale.py [--factors 1 4 16] [--steps 300] [--config configs/bible6-cpu.yaml]

The corpus is the prepared Bible dataset of the config (prepared when
missing), its train and test tuples repeated under new keys (`<key>#<copy>`,
shards of the 1x size; a mechanics benchmark, not a quality one). For each
size it runs, each in a process of its own:

- `interlingua train` for `--steps` steps with one worker: the worker's peak
  resident memory (`train/max_rss_mb`, logged by the loop) and tokens/s
  (median of the log windows, the first dropped), streaming with windows of
  `--window` tuples;
- `interlingua evaluate` of that model on the grown test split: the peak
  resident memory of the driver process (the command's own, from wait4).

On the 1x corpus it also trains with one window holding the whole split,
which is the in-memory path this replaced, and prints the tokens/s ratio.
Targets: peak memory within 1.3x from 1x to 16x, streaming tokens/s at least
0.9x of the in-memory path.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.dataset import MANIFEST, SPM_MODEL, SPM_VOCAB, file_sha256, load_manifest  # noqa: E402
from orchestration.adapters import tracking  # noqa: E402
from orchestration.config import load_config  # noqa: E402

INTERLINGUA = str(Path(sys.executable).with_name("interlingua"))


def grown_dataset(base: Path, factor: int, out: Path) -> Path:
    """The dataset at `base` with every train and test tuple repeated `factor` times under new keys."""
    if (out / MANIFEST).is_file():
        return out
    manifest = load_manifest(base).dump()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for name in (SPM_MODEL, SPM_VOCAB):
        shutil.copy(base / name, out / name)
    for split, entry in manifest["splits"].items():
        copies = 1 if split == "dev" else factor
        files = []
        for i, f in enumerate(entry["files"]):
            table = pq.read_table(base / f["path"])
            for c in range(copies):
                keyed = table.set_column(0, "key", pa.array([f"{k}#{c}" for k in table["key"].to_pylist()]))
                path = f"{split}/part-{i:05d}-copy-{c:03d}.parquet"
                (out / split).mkdir(exist_ok=True)
                pq.write_table(keyed, out / path, compression="zstd")
                files.append(
                    {
                        "path": path,
                        "rows": len(keyed),
                        "bytes": (out / path).stat().st_size,
                        "sha256": file_sha256(out / path),
                    }
                )
        manifest["splits"][split] = {"tuples": sum(f["rows"] for f in files), "files": files}
    manifest["fingerprint"] = f"{manifest['fingerprint']}-x{factor}"
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return out


def run(args: list[str]) -> int:
    """Run an interlingua command; its peak resident memory in MB (wait4's ru_maxrss)."""
    proc = subprocess.Popen([INTERLINGUA, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"interlingua {args[0]} failed: {proc.stderr.read()[-3000:]}")
    return usage.ru_maxrss // 1024


def train_figures(uri: str, run_dir: Path) -> tuple[float, float]:
    """(peak worker RSS in MB, median tokens/s over the log windows but the first) of a training run."""
    run_id = json.loads((run_dir / "train" / "run.json").read_text())["run_id"]
    rss = max(v for _, v in tracking.metric_history(uri, run_id, "train/max_rss_mb"))
    rates = [v for _, v in sorted(tracking.metric_history(uri, run_id, "train/tokens_per_s"))][1:]
    return rss, statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/bible6-cpu.yaml")
    parser.add_argument("--factors", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--window", type=int, default=8000, help="train.window_tuples of the streaming runs")
    parser.add_argument("--runs", default="runs/scale")
    args = parser.parse_args()
    config = load_config(args.config)
    if not (Path(config.data_dir) / MANIFEST).is_file():
        subprocess.run([INTERLINGUA, "prepare", "-c", args.config], check=True)
    runs = Path(args.runs)
    uri = tracking.resolve_uri(f"sqlite:///{runs / 'mlflow.db'}")
    common = [
        "-c",
        args.config,
        f"tracking.uri={uri}",
        f"train.max_steps={args.steps}",
        "train.max_minutes=null",
        "train.eval_every_steps=100000",
        "runtime.checkpoint_every_steps=100000",
        "runtime.log_every_steps=20",
        "train.sample_tuples=30000",
        "model.teacher=null",  # the machinery without the demo's teacher: its pass is not what this measures
    ]
    rows = []
    for factor in args.factors:
        data = grown_dataset(config.data_dir, factor, runs / f"x{factor}" / "data")
        variants = [("streaming", args.window)] + ([("in-memory", 10**9)] if factor == 1 else [])
        for name, window in variants:
            run_dir = runs / f"x{factor}" / name
            shutil.rmtree(run_dir, ignore_errors=True)
            where = [f"run_dir={run_dir}", f"dataset_dir={data}", f"train.window_tuples={window}"]
            run(["train", *common, *where])
            worker_rss, rate = train_figures(uri, run_dir)
            driver_rss = run(["evaluate", *common, *where]) if name == "streaming" else float("nan")
            rows.append((factor, name, load_manifest(data).splits["train"].tuples, worker_rss, rate, driver_rss))
            print(
                f"x{factor:<3} {name:<10} train tuples {rows[-1][2]:>8,}  worker peak {worker_rss:7.0f} MB  "
                f"{rate:8.0f} tok/s  evaluate driver peak {driver_rss:7.0f} MB",
                flush=True,
            )
    stream = {r[0]: r for r in rows if r[1] == "streaming"}
    low, high = min(stream), max(stream)
    print(
        f"\nworker peak {high}x / {low}x: {stream[high][3] / stream[low][3]:.2f} (target <= 1.3); "
        f"evaluate driver peak {high}x / {low}x: {stream[high][5] / stream[low][5]:.2f} (target <= 1.3)"
    )
    memory = [r for r in rows if r[0] == 1 and r[1] == "in-memory"]
    if memory:
        print(f"tokens/s streaming / in-memory on 1x: {stream[1][4] / memory[0][4]:.2f} (target >= 0.9)")


if __name__ == "__main__":
    main()
