"""A recipe's dev error by source after a few minutes of in-process training: for comparing recipes quickly.

    .venv/bin/python benchmarks/mixing.py -c configs/multidomain-cpu.yaml --steps 1500 [KEY=VALUE ...]

The training loop's own parts (`model.stream.BatchStream`, `model.training.train_step`, the LSI
initialization, `model.batching.dev_rows_by_source`, `evaluation.xsim`) in one process, without Ray, MLflow
or checkpoints: the config's model on its prepared dataset (`dataset_dir`; prepare it first), with its
teacher's stored embeddings when `model.teacher` is set (computed by an `interlingua train` of the config
before). Every 500 steps and at the end (`--steps`, or `train.max_minutes`, whichever comes first) it prints
one JSON line: the step, the minutes, the dev error % of each source's tuples searched among themselves (as
training logs `dev/source_xsim_error/<source>`), the last batch's ranking and distillation losses. With
`--testset NAME=DATASET_DIR` (repeatable), the last line also holds the error % on that prepared dataset's test
split, its text embedded as `interlingua evaluate` embeds a test set: the training dataset's normalization and
sentencepiece model (`SentenceEmbedder`), every ordered pair of the trained languages, and the same search in
the teacher's space through the learned map (`_mapped`). `--data-fraction F` trains on a seeded share F of the
training split's row groups; `--minutes M` stops at M minutes with the schedule of the config's budget (equal
wall time for models of different speeds).

The learning rate follows the config's schedule over `train.max_minutes` of this process's time: rows of one
comparison should be read at equal steps, and on a quiet machine their minutes compare too, with a training
run's as well (the process re-executes itself under the workers' allocator settings, `runtime.worker_env`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.worker_env import same_env_as_workers  # noqa: E402
from core.dataset import Dataset  # noqa: E402
from core.normalize import Normalizer  # noqa: E402
from core.teacher import TeacherInput, TeacherStore  # noqa: E402
from evaluation.xsim import average_error, error_matrix  # noqa: E402
from model.args import ModelArgs  # noqa: E402
from model.batching import ParallelCorpus, dev_rows_by_source, sample_corpus, shard_units  # noqa: E402
from model.inference import embed_rows  # noqa: E402
from model.nmt import MultilingualNMT  # noqa: E402
from model.stream import BatchStream  # noqa: E402
from model.training import cpu_threads, make_optimizer, scheduled_lr, train_step  # noqa: E402
from orchestration.adapters import model_dir as model_files  # noqa: E402
from orchestration.config import load_config  # noqa: E402
from orchestration.embedding.embedder import SentenceEmbedder  # noqa: E402
from orchestration.train import builders  # noqa: E402
from orchestration.train.teacher import resolve as resolve_teacher  # noqa: E402
from orchestration.train.worker import _init_lsi  # noqa: E402

CPU = torch.device("cpu")


def teacher_store(config, data: Dataset) -> TeacherStore | None:
    """The config's teacher's embeddings of this dataset, stored by an earlier training (None without a teacher)."""
    if resolve_teacher(config) is None:
        return None
    found = sorted((Path(str(data.location)) / "teacher").glob("*/manifest.json"))
    if not found:
        sys.exit(f"{data.location}: no teacher embeddings; run `interlingua train` of this config once first")
    return TeacherStore.open(found[-1].parent)


def recipe_parts(config, data_fraction: float = 1.0) -> tuple[list[str], list, ModelArgs, BatchStream]:
    """The config's dataset as rank 0 of 1 training worker reads it: the trained languages, the training split's
    shard units, the model's arguments (with the teacher's map when the config has a teacher, its stored
    embeddings streamed with the batches) and the batch stream."""
    t, m = config.train, config.model
    data = Dataset.open(config.data_dir)
    store = teacher_store(config, data)
    languages = builders.trained_languages(config, data.languages)
    units = shard_units(data.files("train"))
    if data_fraction < 1:  # a seeded share of the training split's row groups: the data hypothesis at equal steps
        keep = np.random.default_rng(config.train.seed).permutation(len(units))[
            : max(1, round(data_fraction * len(units)))
        ]
        units = [units[i] for i in sorted(keep)]
    model_args = builders.model_args(config, languages, data.vocab_size)
    if store is not None:
        model_args = model_args.model_copy(update={"distill_dim": store.dim})
    stream = BatchStream(
        units,
        languages,
        builders.training_paths(t),
        seed=t.seed,
        rank=0,
        world=1,
        max_tokens=t.max_tokens,
        window_tuples=t.window_tuples,
        monolingual=t.monolingual,
        source_weights=t.source_weights,
        teacher=(
            TeacherInput(
                store,
                m.distill_pivot,
                every_language=m.distill_languages == "all",
                source_weights=m.distill_source_weights,
            )
            if store is not None
            else None
        ),
    )
    return languages, units, model_args, stream


def testset_errors(model: MultilingualNMT, config, languages: list[str], testsets: list[str]) -> dict[str, float]:
    """The error % of each `NAME=DATASET_DIR`'s test split (its tuples complete in `languages`, counted as
    `NAME_tuples`), read as text and tokenized as the training dataset tokenizes it."""
    data = Dataset.open(config.data_dir)
    processor = model_files.load_tokenizer(Path(data.spm_model))  # a local dataset (this benchmark's)
    embedder = SentenceEmbedder(model, processor, Normalizer(config.prepare.normalize))
    errors = {}
    for spec in testsets:
        name, _, folder = spec.partition("=")
        table = Dataset.open(folder).verify(("test",), spm=False).read("test", [f"{lang}_text" for lang in languages])
        complete = np.ones(len(table), dtype=bool)
        for lang in languages:
            complete &= table[f"{lang}_text"].is_valid().to_numpy(zero_copy_only=False)
        texts = {lang: [t for t, ok in zip(table[f"{lang}_text"].to_pylist(), complete) if ok] for lang in languages}
        with torch.no_grad():
            vectors = {lang: embedder.embed(texts[lang], lang) for lang in languages}
        errors[name] = round(100 * average_error(error_matrix(vectors)), 2)
        errors[f"{name}_tuples"] = int(complete.sum())  # searched; the rest lack a language
        if model.distill_map is not None:  # the same search in the teacher's space, through the learned map
            with torch.no_grad():
                mapped = {lang: model.distill_map(torch.from_numpy(v)).numpy() for lang, v in vectors.items()}
            errors[f"{name}_mapped"] = round(100 * average_error(error_matrix(mapped)), 2)
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-c", "--config", required=True)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument(
        "--minutes", type=float, default=None, help="stop after these minutes (the schedule still follows the config)"
    )
    parser.add_argument("--tag", default="", help="a name for the rows")
    parser.add_argument(
        "--data-fraction", type=float, default=1.0, help="train on this share of the split's row groups (seeded)"
    )
    parser.add_argument(
        "--testset", action="append", default=[], metavar="NAME=DATASET_DIR", help="a prepared test split, at the end"
    )
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE, as on the command line of interlingua")
    args = parser.parse_args()
    config = load_config(args.config, args.overrides)
    same_env_as_workers(config)  # its allocator settings: minutes that compare with a training run's
    t, m = config.train, config.model
    cpu_threads(config.runtime.cpus_per_worker)  # as a training worker does
    languages, units, model_args, stream = recipe_parts(config, args.data_fraction)
    torch.manual_seed(t.seed)
    model = MultilingualNMT.build(model_args)
    if m.embed_init == "lsi":
        _init_lsi(model, sample_corpus(units, languages, t.sample_tuples), t.seed, 1)  # rank 1: no log line
    optimizer = make_optimizer(model, lr=t.lr, weight_decay=t.weight_decay, device=CPU)
    dev = ParallelCorpus.read(config.data_dir, "dev", languages, keys=True)
    rows, by_source = dev_rows_by_source(dev, t.dev_max_sentences)
    by_source = by_source or {config.name: np.arange(len(rows))}
    schedule = builders.schedule_args(t)
    started, elapsed = time.perf_counter(), 0.0
    for step in range(1, args.steps + 1):
        batch = next(stream)
        lr = scheduled_lr(step - 1, elapsed, **schedule)
        if lr is not None:
            for group in optimizer.param_groups:
                group["lr"] = lr
        out = train_step(
            model,
            optimizer,
            batch.sources,
            batch.targets,
            ranking_weight=m.ranking_weight,
            grad_clip=t.grad_clip,
            device=CPU,
            teacher=batch.teacher,
            distill_weight=m.distill_weight,
            teacher_weight=batch.teacher_weight,
        )
        elapsed = time.perf_counter() - started
        done = step == args.steps or any(60 * limit <= elapsed for limit in (t.max_minutes, args.minutes) if limit)
        if step % 500 == 0 or done:
            model.eval()
            embeddings = embed_rows(model, dev, rows, device=CPU)
            tests = testset_errors(model, config, languages, args.testset) if done else {}
            model.train()
            errors = {
                name: round(100 * average_error(error_matrix({lang: e[at] for lang, e in embeddings.items()})), 2)
                for name, at in by_source.items()
            }
            print(
                json.dumps(
                    {
                        "tag": args.tag,
                        "step": step,
                        "minutes": round(elapsed / 60, 1),
                        **errors,
                        **tests,
                        "ranking_loss": round(out.ranking.detach().item(), 4) if out.ranking is not None else None,
                        "distill_loss": round(out.distill.detach().item(), 5) if out.distill is not None else None,
                    }
                ),
                flush=True,
            )
        if done:
            break


if __name__ == "__main__":
    main()
