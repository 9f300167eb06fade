"""Training step time and embedding speed on fresh and on trained weights, with and without denormals flushed.

    .venv/bin/python benchmarks/denormals.py -c configs/multidomain-cpu.yaml --model runs/<run>/train/model \
        [--batches 100] [--passes 2] [KEY=VALUE ...]

A trained LSTM's activations and gradients reach the denormal range (under 1.2e-38 in float32), where the CPU
takes many times the cycles per operation. Each variant runs in a process of its own, since the flag must be set
before torch's intra-op threads start (`model.training.cpu_threads`): `plain` never sets it, `flushed` sets it
first, as a training worker does. Each process embeds the dev split's sentences of every language
(`SentenceEmbedder.embed`, as `embed`, `evaluate` and `serve` do; one warm-up pass, then `--passes` timed), then
times the same batches (`model.stream.BatchStream` of the config's dataset, with its teacher's stored vectors
when it has one: `benchmarks/mixing.py`'s `recipe_parts`) through `model.training.train_step` after 20 warm-up
steps, each on a fresh model of the config and on the trained model's weights. One JSON line per variant, then
the ratios: trained / fresh in each process, and plain / flushed on the trained weights.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WARMUP = 20


def measure(config_path: str, model_dir: str, batches: int, passes: int, flushed: bool, overrides: list[str]) -> dict:
    import torch

    from model.training import cpu_threads
    from orchestration.config import load_config

    config = load_config(config_path, overrides)
    if flushed:
        cpu_threads(config.runtime.cpus_per_worker)
    else:
        torch.set_num_threads(config.runtime.cpus_per_worker)

    from benchmarks.mixing import recipe_parts
    from core.dataset import Dataset
    from model.nmt import MultilingualNMT
    from model.training import make_optimizer, train_step
    from orchestration.embedding.embedder import SentenceEmbedder

    t, m = config.train, config.model
    _, _, args, stream = recipe_parts(config)
    drawn = [next(stream) for _ in range(WARMUP + batches)]
    cpu = torch.device("cpu")

    def ms_per_step(model: torch.nn.Module) -> float:
        optimizer = make_optimizer(model, lr=1e-4, weight_decay=t.weight_decay, device=cpu)
        for i, batch in enumerate(drawn):
            if i == WARMUP:
                start = time.perf_counter()
            train_step(
                model,
                optimizer,
                batch.sources,
                batch.targets,
                ranking_weight=m.ranking_weight,
                grad_clip=t.grad_clip,
                device=cpu,
                teacher=batch.teacher,
                distill_weight=m.distill_weight,
            )
        return round(1000 * (time.perf_counter() - start) / batches, 1)

    def sentences_per_s(model: torch.nn.Module) -> float:
        embedder = SentenceEmbedder(model.eval(), loaded.processor, loaded.normalizer)
        for lang, texts in dev.items():  # warm-up
            embedder.embed(texts, lang)
        start = time.perf_counter()
        for _ in range(passes):
            for lang, texts in dev.items():
                embedder.embed(texts, lang)
        return round(passes * sum(map(len, dev.values())) / (time.perf_counter() - start))

    loaded = SentenceEmbedder.load(model_dir, backend="torch")  # the whole model: its steps are timed too
    trained = loaded.model
    table = Dataset.open(config.data_dir).read("dev", [f"{lang}_text" for lang in loaded.languages])
    dev = {lang: [t for t in table.column(f"{lang}_text").to_pylist() if t is not None] for lang in loaded.languages}
    torch.manual_seed(t.seed)
    fresh_model = MultilingualNMT.build(args)
    row = {
        "variant": "flushed" if flushed else "plain",
        "dev_sentences": sum(map(len, dev.values())),
        "fresh_embed_sentences_per_s": sentences_per_s(fresh_model),  # before any step changes the weights
        "trained_embed_sentences_per_s": sentences_per_s(trained),
    }
    return {
        **row,
        "fresh_ms_per_step": ms_per_step(fresh_model.train()),
        "trained_ms_per_step": ms_per_step(trained.train()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-c", "--config", required=True)
    parser.add_argument("--model", required=True, help="a trained model directory of the config's dataset")
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--passes", type=int, default=2, help="timed passes over the dev sentences")
    parser.add_argument("--variant", choices=["plain", "flushed"], help=argparse.SUPPRESS)  # one child process
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE, as on the command line of interlingua")
    args = parser.parse_args()
    if args.variant:
        print(
            json.dumps(
                measure(args.config, args.model, args.batches, args.passes, args.variant == "flushed", args.overrides)
            )
        )
        return
    rows = {}
    for variant in ("plain", "flushed"):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "-c",
                args.config,
                "--model",
                args.model,
                "--batches",
                str(args.batches),
                "--passes",
                str(args.passes),
                "--variant",
                variant,
                *args.overrides,
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        rows[variant] = json.loads(out.strip().splitlines()[-1])
        print(json.dumps(rows[variant]), flush=True)
    plain, flushed = rows["plain"], rows["flushed"]
    print(
        json.dumps(
            {
                "trained_over_fresh_plain": round(plain["trained_ms_per_step"] / plain["fresh_ms_per_step"], 2),
                "trained_over_fresh_flushed": round(flushed["trained_ms_per_step"] / flushed["fresh_ms_per_step"], 2),
                "trained_plain_over_flushed": round(plain["trained_ms_per_step"] / flushed["trained_ms_per_step"], 2),
                "embed_fresh_over_trained_plain": round(
                    plain["fresh_embed_sentences_per_s"] / plain["trained_embed_sentences_per_s"], 2
                ),
                "embed_fresh_over_trained_flushed": round(
                    flushed["fresh_embed_sentences_per_s"] / flushed["trained_embed_sentences_per_s"], 2
                ),
                "embed_trained_flushed_over_plain": round(
                    flushed["trained_embed_sentences_per_s"] / plain["trained_embed_sentences_per_s"], 2
                ),
            }
        )
    )


if __name__ == "__main__":
    main()
