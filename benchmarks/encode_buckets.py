"""The training step with the shared encoder's batch as one padded pass against sorted length buckets.

    .venv/bin/python benchmarks/encode_buckets.py -c configs/multidomain-cpu.yaml [--steps 80] [KEY=VALUE ...]

On the config's prepared dataset (`dataset_dir`) and its model (with its teacher's stored vectors when it has
one), `model.training.train_step` runs each of `--steps` batches of the training stream twice, alternately:
once with `model.nmt.LENGTH_BUCKETS` at 1 (every row padded to the batch's longest sentence) and once at
its default (rows sorted by length, up to that many passes). Both updates start from the same weights and
optimizer state, so the two arms time the same steps. It prints, per arm, the median step in milliseconds
and the share of the LSTM's time steps that read a real token, then the ratio of the medians and of the totals.
The first 10 batches warm up and are not counted.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mixing import CPU, recipe_parts  # noqa: E402

from model import nmt  # noqa: E402
from model.nmt import MultilingualNMT  # noqa: E402
from model.training import cpu_threads, make_optimizer, train_step  # noqa: E402
from orchestration.config import load_config  # noqa: E402

WARMUP = 10


def real_share(lengths: torch.Tensor, buckets: int) -> tuple[int, int]:
    """(tokens, padded time steps) of one shared-encoder batch of these lengths run as `buckets` passes."""
    widths = [int(part.max()) * len(part) for part in lengths.sort().values.tensor_split(buckets)]
    return int(lengths.sum()), sum(widths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-c", "--config", required=True)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE, as on the command line of interlingua")
    args = parser.parse_args()
    config = load_config(args.config, args.overrides)
    t, m = config.train, config.model
    cpu_threads(config.runtime.cpus_per_worker)
    _, _, model_args, stream = recipe_parts(config)
    torch.manual_seed(t.seed)
    model = MultilingualNMT.build(model_args)
    opt = make_optimizer(model, lr=t.lr, weight_decay=t.weight_decay, device=CPU)
    default = nmt.LENGTH_BUCKETS
    arms = {"one pass": 1, f"up to {default} buckets": default}
    times: dict[str, list[float]] = {name: [] for name in arms}
    steps: dict[str, list[int]] = {name: [0, 0] for name in arms}
    for i in range(WARMUP + args.steps):
        batch = next(stream)
        start = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()))
        for name, buckets in arms.items():
            model.load_state_dict(start[0])
            opt.load_state_dict(start[1])
            nmt.LENGTH_BUCKETS = buckets
            began = time.perf_counter()
            train_step(
                model, opt, batch.sources, batch.targets, ranking_weight=m.ranking_weight, grad_clip=t.grad_clip,
                device=CPU, teacher=batch.teacher, distill_weight=m.distill_weight, teacher_weight=batch.teacher_weight,
            )  # fmt: skip
            if i >= WARMUP:
                times[name].append(time.perf_counter() - began)
                ranked = batch.targets if m.ranking_weight > 0 else {}
                lengths = torch.cat([lens for _, lens in {**batch.sources, **ranked}.values()])
                real, padded = real_share(lengths, nmt._buckets(len(lengths)) if buckets > 1 else 1)
                steps[name][0] += real
                steps[name][1] += padded
    nmt.LENGTH_BUCKETS = default
    for name in arms:
        real, padded = steps[name]
        median = 1000 * statistics.median(times[name])
        print(f"{name:>16}: median step {median:6.1f} ms, real tokens {real / padded:.0%}")
    one, split = (times[name] for name in arms)
    print(f"ratio (buckets / one pass): median {statistics.median(split) / statistics.median(one):.3f}, "
          f"total {sum(split) / sum(one):.3f}, over {args.steps} steps")  # fmt: skip


if __name__ == "__main__":
    main()
