"""The object store against the local disk, side by side in one run: the Bible's prepare, training tokens/s
and evaluate with `run_dir` in an S3 server (moto's, a process of its own on loopback) against a local
`run_dir`, the same config. Targets: training tokens/s at least 0.9x of local, evaluate wall time at most
1.3x; prepare's ratio is reported.

    python benchmarks/storage.py [--repeats 3] [--steps 200] [--config configs/bible6-cpu.yaml] [KEY=VALUE ...]

Each repeat runs both variants (interleaved, the order alternating), each on a fresh run dir: prepare, train
`--steps` steps (tokens/s: the median of the logged `train/tokens_per_s` after the first window, which holds
start-up), evaluate. Prints medians and the paired ratios (a repeat's S3 figure over the same repeat's local
one). With `runtime.log_every_steps`, `train.eval_every_steps` and `runtime.checkpoint_every_steps` equal,
every window after the first holds a dev evaluation and a checkpoint with its upload. moto keeps its objects
in memory: a real store adds its network, which this does not measure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test tooling: tests.support
from tests.support.s3 import s3_server  # noqa: E402


def one(config_path: str, run_dir: str, steps: int, uri: str, overrides: list[str]) -> dict[str, float]:
    from orchestration.adapters import tracking
    from orchestration.config import load_config
    from orchestration.evaluate.job import evaluate
    from orchestration.train.driver import train
    from pipelines.prepare import run_prepare
    from pipelines.runners import pipeline_options

    config = load_config(
        config_path,
        [
            f"run_dir={run_dir}",
            f"tracking.uri={uri}",
            f"train.max_steps={steps}",
            "train.max_minutes=null",
            f"name=storage-{int(time.time() * 1000)}",
            "model.teacher=null",  # the machinery without the demo's teacher: its pass is not what this measures
            *overrides,
        ],
    )
    started = time.perf_counter()
    run_prepare(config.prepare, config.data_dir, options=pipeline_options([]), resolved_config=config.to_dict())
    prepared = time.perf_counter()
    result = train(config)
    trained = time.perf_counter()
    evaluate(config)
    evaluated = time.perf_counter()
    rates = [v for _, v in tracking.metric_history(uri, result.run_id, "train/tokens_per_s")][1:]
    return {
        "prepare_s": prepared - started,
        "train_s": trained - prepared,
        "evaluate_s": evaluated - trained,
        "tokens_per_s": statistics.median(rates) if rates else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--config", default="configs/bible6-cpu.yaml")
    parser.add_argument(
        "overrides",
        nargs="*",
        help="config overrides for both variants, e.g. "
        "runtime.checkpoint_every_steps=50 (windows that hold a checkpoint's upload)",
    )
    args = parser.parse_args()
    from core import connection

    with tempfile.TemporaryDirectory(prefix="bench-storage-") as tmp, s3_server(Path(tmp) / "s3") as s3:
        os.environ.update(s3.env)
        connection.configure()
        uri = f"sqlite:///{tmp}/mlflow.db"
        rows: dict[str, list[dict[str, float]]] = {"local": [], "s3": []}
        for repeat in range(args.repeats):
            order = ["local", "s3"] if repeat % 2 == 0 else ["s3", "local"]
            for kind in order:
                run_dir = f"{tmp}/local-{repeat}" if kind == "local" else f"s3://{s3.bucket}/run-{repeat}"
                rows[kind].append(one(args.config, run_dir, args.steps, uri, args.overrides))
                print(
                    f"repeat {repeat} {kind}: " + ", ".join(f"{k} {v:,.1f}" for k, v in rows[kind][-1].items()),
                    flush=True,
                )
    print(f"\nmedians of {args.repeats} repeats (load {os.getloadavg()[0]:.2f} at the end)")
    print(f"{'':14}{'local':>12}{'s3':>12}{'s3 / local':>12}  target")
    targets = {"tokens_per_s": ">= 0.9", "evaluate_s": "<= 1.3", "prepare_s": "(reported)", "train_s": ""}
    for key, target in targets.items():
        local = statistics.median(r[key] for r in rows["local"])
        s3_ = statistics.median(r[key] for r in rows["s3"])
        paired = statistics.median(s[key] / loc[key] for s, loc in zip(rows["s3"], rows["local"]))
        print(f"{key:14}{local:12,.1f}{s3_:12,.1f}{paired:12.2f}  {target}")


if __name__ == "__main__":
    main()
