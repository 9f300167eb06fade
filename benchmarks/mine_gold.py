"""Mining quality on real text, BUCC's protocol: the test verses of one language pair hidden among distractors.

    .venv/bin/python benchmarks/mine_gold.py [--config configs/bible6-cpu.yaml] [--pair fr en]
        [--distractors 4000] [--model runs/bible6-cpu/train/model] [--fixed 1.05]

The inputs are the config's prepared dataset: for the pair (x, y), the x side
of the test tuples plus the x side of `--distractors` training tuples, and the
y side of the test tuples plus the y side of as many *other* training tuples,
so only the test tuples have a translation on the other side. Every model
given (`--model`, repeatable; `use` for the offline USE baseline) mines them
with `interlingua mine`, and the script prints precision, recall and F1 at the
threshold calibrated on the test tuples (the best F1 it can reach: an upper
bound for a threshold chosen elsewhere), at the threshold calibrated on a gold
set of its own (the dev tuples hidden the same way among other distractors:
what a user does, who calibrates on pairs they know and mines pairs they do
not), and at a fixed threshold.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.dataset import MANIFEST, read_split  # noqa: E402
from orchestration.config import load_config, with_values  # noqa: E402
from orchestration.mine.job import mine  # noqa: E402


def write_inputs(config, x: str, y: str, distractors: int, folder: Path, seed: int = 0, split: str = "test") -> int:
    """x.txt and y.txt: the split's tuples' sentences among distractors of the training split (another draw
    for another `seed`); the number of true pairs."""
    test = read_split(config.data_dir, split, [f"{x}_text", f"{y}_text"]).to_pylist()
    test = [t for t in test if t[f"{x}_text"] and t[f"{y}_text"]]
    train = [
        t
        for t in read_split(config.data_dir, "train", [f"{x}_text", f"{y}_text"]).to_pylist()
        if t[f"{x}_text"] and t[f"{y}_text"]
    ]
    order = np.random.default_rng(seed).permutation(len(train))
    only_x, only_y = order[:distractors], order[distractors : 2 * distractors]
    xs = [t[f"{x}_text"] for t in test] + [train[i][f"{x}_text"] for i in only_x]
    ys = [train[i][f"{y}_text"] for i in only_y] + [t[f"{y}_text"] for t in test][::-1]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{x}.txt").write_text("".join(s + "\n" for s in xs), encoding="utf-8")
    (folder / f"{y}.txt").write_text("".join(s + "\n" for s in ys), encoding="utf-8")
    return len(test)


def at_threshold(curve: dict, threshold: float) -> dict[str, float]:
    """P, R and F1 of the pairs scoring at least `threshold`, read off the calibration curve (which holds
    every distinct score of the candidates that passed the filters, best first)."""
    at = np.flatnonzero(curve["threshold"] >= threshold)
    if not len(at):
        return {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    i = at[-1]
    return {key: float(curve[key][i]) for key in ("precision", "recall", "f1")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/bible6-cpu.yaml")
    parser.add_argument("--pair", nargs=2, default=["fr", "en"])
    parser.add_argument("--distractors", type=int, default=4000)
    parser.add_argument("--model", action="append", help="a model directory or 'use' (repeatable)")
    parser.add_argument("--fixed", type=float, default=1.05, help="the fixed margin threshold reported")
    parser.add_argument("--out", default="runs/mine-gold")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    config = load_config(args.config)
    if not (Path(config.data_dir) / MANIFEST).is_file():
        raise SystemExit(f"{config.data_dir}: prepare the dataset first (interlingua prepare -c {args.config})")
    x, y = args.pair
    folder = Path(args.out)
    total = write_inputs(config, x, y, args.distractors, folder)
    write_inputs(config, x, y, args.distractors, folder / "gold", seed=1, split="dev")
    rows = []

    def mined(model: str, name: str, where: Path, split: str):
        run = with_values(
            config,
            {
                "mine.model": model,
                "mine.output_dir": str(where / name),
                "mine.gold": {"split": split},
                "mine.inputs": [
                    {"lang": x, "path": str(where / f"{x}.txt")},
                    {"lang": y, "path": str(where / f"{y}.txt")},
                ],
            },
        )
        (calibrated,) = mine(run).pairs
        return calibrated

    for model in args.model or ["use", str(Path(config.train_dir) / "model")]:
        name = "use" if model == "use" else Path(model).parent.parent.name
        calibrated = mined(model, name, folder, "test")
        gold = mined(model, name, folder / "gold", "dev")
        rows.append(
            (
                name,
                calibrated,
                {"threshold": gold.threshold, **at_threshold(calibrated.curve, gold.threshold)},
                at_threshold(calibrated.curve, args.fixed),
            )
        )
    print(f"\n{x}-{y}: {total} true pairs among {total + args.distractors} sentences per side")
    print(
        f"{'model':<14} {'calibrated':>10} {'P':>6} {'R':>6} {'F1':>6}   {'on dev':>8} {'P':>6} {'R':>6} {'F1':>6}"
        f"   at {args.fixed}: {'P':>6} {'R':>6} {'F1':>6}"
    )
    for name, cal, g, f in rows:
        c = cal.scores
        print(
            f"{name:<14} {cal.threshold:>10.4f} {c['precision']:>6.3f} {c['recall']:>6.3f} {c['f1']:>6.3f}   "
            f"{g['threshold']:>8.4f} {g['precision']:>6.3f} {g['recall']:>6.3f} {g['f1']:>6.3f}   "
            f"{'':>{len(str(args.fixed)) + 4}}{f['precision']:>6.3f} {f['recall']:>6.3f} {f['f1']:>6.3f}"
        )
    (folder / "results.json").write_text(
        json.dumps(
            [
                {
                    "model": n,
                    "calibrated": {"threshold": c.threshold, **c.scores},
                    "calibrated_on_dev": g,
                    "fixed": {"threshold": args.fixed, **f},
                }
                for n, c, g, f in rows
            ],
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
