"""The `interlingua` command line.

    interlingua prepare --config configs/bible6.yaml prepare.spm.vocab_size=8000
    interlingua prepare --workers 2                       # Beam in 2 processes
    interlingua prepare --runner=FlinkRunner --flink_master=host:8081   # any Beam flags
    interlingua train --config configs/bible6-cpu.yaml    # Ray Train; resumes a stopped run
    interlingua evaluate --config configs/bible6-cpu.yaml # L x L similarity-search error -> MLflow
    interlingua search -c configs/bible6-cpu.yaml -q "Dieu est amour." -l fr --in en,zh
    interlingua embed -c configs/bible6-cpu.yaml -l en -i corpus/ 'more/*.txt' -o embeddings/   # Ray Data
    interlingua run -c configs/bible6-cpu.yaml            # the whole job, for cron (see exit codes)
    interlingua compare -c configs/bible6-cpu.yaml --plot runs/compare.png
    interlingua tune -c configs/bible6-cpu.yaml --space configs/tune/bible6-cpu.yaml   # Ray Tune search
    interlingua config --config configs/bible6.yaml       # print the resolved config

Arguments of the form `section.key=value` override the config; every other
unrecognized `--flag` goes to Apache Beam unchanged.
"""
from __future__ import annotations

import argparse
import logging
import re
import sys
from typing import Sequence

from orchestration import logs
from orchestration.config import ConfigError, load_config

log = logging.getLogger("interlingua")

_OVERRIDE = re.compile(r"^[A-Za-z_][\w]*(\.[\w]+)*=")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("interlingua")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"


# One example per command, shown under its --help (tests check every command has one).
EXAMPLES = {
    "prepare": "interlingua prepare -c configs/bible6-cpu.yaml prepare.spm.vocab_size=8000 --workers 2",
    "train": "interlingua train -c configs/bible6-cpu.yaml train.max_minutes=5",
    "evaluate": "interlingua evaluate -c configs/bible6-cpu.yaml evaluate.split=dev",
    "run": "interlingua run -c configs/bible6-cpu.yaml --wait   # in a crontab; exit codes as above",
    "tune": "interlingua tune -c configs/bible6-cpu.yaml --space configs/tune/bible6-cpu.yaml",
    "compare": "interlingua compare -c configs/bible6-cpu.yaml --pairs --plot runs/compare.png",
    "search": "interlingua search -c configs/bible6-cpu.yaml -q \"Dieu est amour.\" -l fr --in en,zh -k 3",
    "embed": "interlingua embed -c configs/bible6-cpu.yaml -l en -i corpus/ 'more/*.txt' -o embeddings/",
    "mine": "interlingua mine -c configs/bible6-cpu.yaml \"mine.inputs=[{lang: fr, path: fr.txt}, "
            "{lang: en, path: en.txt}]\" mine.threshold=1.06",
    "config": "interlingua config -c configs/bible6-cpu.yaml train.lr=3e-4",
}


class _HelpFormatter(argparse.HelpFormatter):
    """Wraps the description as usual; keeps the example as written, to be copied."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return text if text.startswith("Example:") else super()._fill_text(text, width, indent)


def _command(sub: argparse._SubParsersAction, name: str, **kwargs: str) -> argparse.ArgumentParser:
    """A subcommand's parser, with its example under --help and the verbosity flags."""
    p = sub.add_parser(name, epilog=f"Example:\n  {EXAMPLES[name]}",
                       formatter_class=_HelpFormatter, **kwargs)
    _verbosity_flags(p, default=argparse.SUPPRESS)
    return p


def _verbosity_flags(p: argparse.ArgumentParser, default: object = False) -> None:
    # on the main parser and (default=SUPPRESS, so as not to reset it) on every command: both orders work
    p.add_argument("-v", "--verbose", action="store_true", default=default,
                   help="debug lines, and the libraries' own (Beam, Ray, faiss, MLflow)")
    p.add_argument("--quiet", action="store_true", default=default,
                   help="print only the result (and warnings and errors)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="interlingua",
        description="Learn language-independent sentence embeddings from N-way parallel corpora.",
    )
    _verbosity_flags(parser)
    parser.add_argument("--version", action="version", version=f"interlingua {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--config", "-c", help="run config (YAML); schema defaults when omitted")
        p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                       help="config overrides, e.g. prepare.spm.vocab_size=8000")
        return p

    prep = with_config(_command(sub,
        "prepare",
        help="clean, deduplicate, split, BPE-encode and shard a corpus into Parquet (Apache Beam)",
        description="Run the corpus-preparation Beam job. Unrecognized --flags are Beam pipeline "
        "options (--runner, --flink_master, --project, ...); without --runner the job runs in "
        "this process.",
    ))
    prep.add_argument("--workers", type=int, default=1,
                      help="processes for the in-process runner (default 1)")
    prep.add_argument("--force", action="store_true",
                      help="rebuild even if the dataset is up to date")
    trn = with_config(_command(sub,
        "train",
        help="train the multilingual encoders on the prepared dataset (Ray Train; resumes a stopped run)",
        description="Train with Ray Train on runtime.num_workers workers, on the cluster at "
        "runtime.ray_address or a local one. Rerunning the same config resumes from the last checkpoint.",
    ))
    trn.add_argument("--force", action="store_true", help="discard this run's checkpoints and start over")
    ev = with_config(_command(sub,
        "evaluate",
        help="similarity-search error of a trained model on the dev or test split (Ray + faiss)",
        description="Embed evaluate.split with a Ray Data actor pool, search every ordered language pair "
        "in evaluate.shards shards with Ray tasks, log the L x L matrix to MLflow; then each of "
        "evaluate.testsets, each its own MLflow run.",
    ))
    ev.add_argument("--testset", help="evaluate only this evaluate.testsets entry")
    ev.add_argument("--model", help="a model directory (default: <run_dir>/train/model)")
    ev.add_argument("--force", action="store_true",
                    help="evaluate again even if this model was evaluated on this data and config")
    run = with_config(_command(sub,
        "run",
        help="prepare -> train -> evaluate -> register, skipping unchanged stages (for cron and schedulers)",
        description="Exit codes: 0 trained and promoted, 3 nothing to do, 4 trained but not promoted, "
        "5 another run holds the lock, 1 failed, 2 bad configuration or input. Unrecognized --flags go "
        "to the Beam job.",
    ))
    run.add_argument("--wait", action="store_true", help="wait for a running job instead of exiting with 5")
    tun = with_config(_command(sub,
        "tune",
        help="search hyperparameters with Ray Tune (ASHA); writes the best trial's config",
        description="Each trial is a training run of the config plus its sampled keys, nested under one "
        "MLflow tune run; weak trials stop early. Rerunning the same command resumes the search.",
    ))
    tun.add_argument("--space", required=True, help="the search space (YAML: space, num_samples, scheduler)")
    cmp = _command(sub, "compare", help="the runs of an MLflow experiment side by side")
    cmp.add_argument("--config", "-c", help="run config (its tracking section; schema defaults when omitted)")
    cmp.add_argument("--experiment", help="experiment name (default: tracking.experiment)")
    cmp.add_argument("--max-runs", type=int, default=20, help="most recent evaluation runs to show (default 20)")
    cmp.add_argument("--pairs", action="store_true", help="also show every language pair's error")
    cmp.add_argument("--stage", choices=["evaluate", "train"], default="evaluate",
                     help="evaluation runs (test error, default) or training runs and tune trials (dev error)")
    cmp.add_argument("--testset", help="the evaluation runs of this evaluate.testsets name (default: the split's)")
    cmp.add_argument("--plot", help="write a figure (learning curves, error-matrix differences) to this PNG")
    cmp.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    srch = with_config(_command(sub,
        "search", help="the nearest sentences of the evaluation split to a query sentence, in other languages",
    ))
    srch.add_argument("--query", "-q", required=True, help="the query sentence")
    srch.add_argument("--lang", "-l", required=True, help="the query's language")
    srch.add_argument("--in", dest="targets", help="languages to search, comma-separated (default: all others)")
    srch.add_argument("-k", type=int, default=5, help="neighbours per language (default 5)")
    srch.add_argument("--model", help="a model directory (default: <run_dir>/train/model)")
    emb = with_config(_command(sub,
        "embed", help="sentences (text lines or a Parquet column) -> embedding blocks + manifest (Ray Data)",
        description="Embed text files (one sentence per line) and Parquet files (--column) with a Ray Data actor "
        "pool (runtime.embed_actors, runtime.cpus_per_task or a GPU each) into OUT/part-NNNNN.npy blocks and "
        "OUT/manifest.json. A rerun skips complete blocks. -o FILE.npy embeds small text input in this process.",
    ))
    emb.add_argument("--lang", "-l", required=True, help="the sentences' language")
    emb.add_argument("--input", "-i", nargs="+", default=["-"],
                     help="text or Parquet files, directories, globs ('corpus/*.txt'); '-' is stdin (with FILE.npy)")
    emb.add_argument("--output", "-o", required=True,
                     help="a directory (blocks + manifest.json), or FILE.npy: one (N, D) array (small inputs)")
    emb.add_argument("--column", default="text", help="the text column of Parquet inputs (default: text)")
    emb.add_argument("--block-rows", type=int, default=20000, help="sentences per block (default 20000)")
    emb.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    emb.add_argument("--model", help="a model directory (default: <run_dir>/train/model)")
    emb.add_argument("--force", action="store_true",
                     help="replace interlingua's embeddings of other inputs in the output directory (never other "
                     "files), or an existing -o FILE.npy")
    with_config(_command(sub,
        "mine",
        help="mine parallel sentences from monolingual text by margin (faiss); the pairs feed `prepare`",
        description="Embed every mine.inputs language, search both ways, score by ratio margin, drop the known "
        "garbage, keep pairs above mine.threshold (or the max-F1 threshold on mine.gold).",
    ))
    with_config(_command(sub, "config", help="print the resolved configuration as YAML"))
    return parser


def _user_errors() -> tuple[type[Exception], ...]:
    from orchestration.evaluate import EvaluateError
    from orchestration.mine import MineError
    from orchestration.model_dir import ModelDirError
    from orchestration.train.driver import TrainError
    from pipelines.dataset import DatasetError
    from pipelines.errors import HeldOutError, SourceError
    from pipelines.storage import ForeignDataError, StorageError

    return (ConfigError, SourceError, HeldOutError, DatasetError, TrainError, EvaluateError, MineError,
            ModelDirError, ForeignDataError, StorageError)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args, unknown = _parser().parse_known_args(argv)
    bad = [a for a in unknown if not a.startswith("-")]
    beam_args = [a for a in unknown if a.startswith("-")]
    overrides = list(args.overrides)
    for arg in bad:
        # a value that followed a Beam flag ("--job_endpoint embed") belongs to Beam
        (overrides if _OVERRIDE.match(arg) else beam_args).append(arg)
    logs.configure(logs.VERBOSE if args.verbose else logs.QUIET if args.quiet else logs.DEFAULT)
    _USER_ERRORS = _user_errors()
    try:
        config = load_config(args.config, overrides)
        if args.command == "config":
            from pipelines.config import dump_yaml

            print(dump_yaml(config.to_dict()), end="")
            return 0
        if beam_args and args.command not in ("prepare", "run"):
            raise ConfigError(f"unknown arguments: {' '.join(beam_args)}")
        if args.command in ("prepare", "train", "evaluate", "run", "tune", "mine"):
            from pathlib import Path

            from orchestration.state import check_writable

            check_writable(Path(config.run_dir), "run_dir")  # before any work, not at its end
        if args.command == "train":
            return _train(config, args)
        if args.command == "evaluate":
            return _evaluate(config, args)
        if args.command == "search":
            return _search(config, args)
        if args.command == "run":
            return _run(config, args, beam_args)
        if args.command == "compare":
            return _compare(config, args)
        if args.command == "embed":
            return _embed(config, args)
        if args.command == "tune":
            return _tune(config, args)
        if args.command == "mine":
            return _mine(config)
        return _prepare(config, args, beam_args)
    except _USER_ERRORS as exc:
        print(f"interlingua {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except ConnectionError as exc:  # the tracking store or the cluster: not the input's fault, exit 1
        print(f"interlingua {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        resume = "; the same command resumes from the last checkpoint" if args.command == "train" else ""
        print(f"interlingua {args.command}: interrupted; nothing half-done was published{resume}", file=sys.stderr)
        return 130


def _prepare(config, args: argparse.Namespace, beam_args: list[str]) -> int:
    from pipelines.prepare import run_prepare, summary
    from pipelines.runners import pipeline_options

    if args.workers < 1:
        raise ConfigError("--workers must be at least 1")
    result = run_prepare(
        config.prepare,
        config.data_dir,
        options=pipeline_options(beam_args, workers=args.workers),
        resolved_config=config.to_dict(),
        force=args.force,
    )
    print(summary(result))
    print(f"dataset: {config.data_dir}")
    return 0


def _train(config, args: argparse.Namespace) -> int:
    from orchestration.train.driver import train

    result = train(config, force=args.force)
    verb = "already trained" if result.skipped else "trained"
    error = "n/a" if result.dev_error is None else f"{result.dev_error:.4f}"
    print(f"{verb}: step {result.step}, best dev similarity error {error}")
    print(f"model: {result.model_dir}  (MLflow run {result.run_id})")
    return 0


def _evaluate(config, args: argparse.Namespace) -> int:
    from pathlib import Path

    from orchestration.evaluate.job import evaluate

    model_dir = Path(args.model) if args.model else None
    names = [args.testset] if args.testset else [None, *(t.name for t in config.evaluate.testsets)]
    for name in names:
        result = evaluate(config, model_dir=model_dir, force=args.force, testset=name)
        if len(names) > 1 or args.testset:
            print(f"test set {name}:" if name else f"split {config.evaluate.split}:")
        print(result.format_matrix())
        print(f"tables and heatmap: {result.out_dir}  (MLflow run {result.run_id})")
    return 0


def _run(config, args: argparse.Namespace, beam_args: list[str]) -> int:
    from orchestration.lifecycle.run import EXIT_ALREADY_RUNNING, EXIT_FAILED, AlreadyRunning, run_pipeline

    try:
        outcome = run_pipeline(config, wait=args.wait, beam_args=beam_args)
    except AlreadyRunning as exc:
        print(f"interlingua run: {exc}", file=sys.stderr)
        return EXIT_ALREADY_RUNNING
    except _user_errors():
        raise
    except ConnectionError as exc:
        print(f"interlingua run: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except Exception:  # noqa: BLE001 - a scheduler needs the exit code; the traceback goes to the log
        log.exception("interlingua run failed")
        return EXIT_FAILED
    print(outcome.matrix)
    print(" ".join(f"{stage}: {state}" for stage, state in outcome.stages.items()))
    print(outcome.message)
    print(f"MLflow pipeline run {outcome.run_id}; `mlflow ui --backend-store-uri {config.tracking.uri}`")
    return outcome.code


def _compare(config, args: argparse.Namespace) -> int:
    from orchestration.lifecycle.compare import compare_runs

    print(compare_runs(config, experiment=args.experiment, max_runs=args.max_runs, pairs=args.pairs,
                       plot=args.plot, stage=args.stage, testset=args.testset))
    return 0


def _tune(config, args: argparse.Namespace) -> int:
    from orchestration.train.tune import load_space, tune

    result = tune(config, load_space(args.space), space_path=args.space)
    print(f"{result.trials} trials; best dev similarity error {result.best_error:.4f}")
    print(f"best config: {result.best_config}  (MLflow tune run {result.run_id})")
    print(f"next: interlingua run -c {result.best_config}")
    return 0


def _mine(config) -> int:
    from orchestration.mine.job import mine

    result = mine(config)
    for pair in result.pairs:
        gold = "" if pair.scores is None else " P {precision:.3f} R {recall:.3f} F1 {f1:.3f}".format(**pair.scores)
        print(f"{pair.name}: {pair.candidates:,} candidates, {len(pair.kept):,} pairs above {pair.threshold:.4f}"
              f"{gold}; dropped: " + ", ".join(f"{r} {n:,}" for r, n in pair.dropped.items()))
    print(f"pairs and report: {result.out_dir}  (MLflow run {result.run_id})")
    return 0


def _search(config, args: argparse.Namespace) -> int:
    from pathlib import Path

    from orchestration.serve.nearest import nearest_sentences

    if args.k < 1:
        raise ConfigError("-k must be at least 1")
    languages = config.train.languages or _dataset_languages(config)
    targets = args.targets.split(",") if args.targets else [lang for lang in languages if lang != args.lang]
    try:
        found = nearest_sentences(config, args.query, args.lang, targets, args.k,
                                  Path(args.model) if args.model else None)
    except (ValueError, FileNotFoundError) as exc:
        raise ConfigError(str(exc)) from None
    for lang, hits in found.items():
        print(f"[{lang}]")
        for score, key, text in hits:
            print(f"  {score:.3f}  {key}  {text}")
    return 0


def _embed(config, args: argparse.Namespace) -> int:
    from pathlib import Path

    from orchestration import model_dir

    model = Path(args.model) if args.model else model_dir.default(config.train_dir)
    parent = Path(args.output).resolve().parent
    if not parent.is_dir():  # before the embedding work, not after it
        raise ConfigError(f"-o {args.output}: directory {parent} does not exist; create it first")
    try:
        if args.output.endswith(".npy"):
            if Path(args.output).exists() and not args.force:
                raise ConfigError(f"-o {args.output} exists; pass --force to replace it, or give another file")
            return _embed_small(model, args)
        if "-" in args.input:
            raise ConfigError("stdin (-i -) is embedded in this process: give -o FILE.npy")
        from orchestration.serve.corpus import embed_corpus

        r = config.runtime
        result = embed_corpus(args.input, Path(args.output), lang=args.lang, model_dir=model, config=config.to_dict(),
                              column=args.column, dtype=args.dtype, block_rows=args.block_rows, actors=r.embed_actors,
                              cpus_per_actor=r.cpus_per_task, use_gpu=r.use_gpu,
                              max_tokens=config.evaluate.max_tokens, force=args.force, ray_address=r.ray_address)
    except (ValueError, OSError) as exc:
        raise ConfigError(str(exc)) from None
    print(f"{result.rows} sentences ({result.empty} empty) -> {result.out_dir}/ in {result.blocks} blocks "
          f"({result.computed} embedded now, {result.blocks - result.computed} complete already; "
          f"{result.seconds:.0f} s); see manifest.json")
    return 0


def _embed_small(model, args: argparse.Namespace) -> int:
    import numpy as np

    from orchestration.serve.corpus import embed_in_process
    from orchestration.serve.embedder import SentenceEmbedder

    embedder = SentenceEmbedder.load(model)
    if args.lang not in embedder.languages:
        raise ValueError(f"the model knows {embedder.languages}, not {args.lang!r}")
    if any(name.endswith(".parquet") for name in args.input):
        raise ValueError("Parquet input needs an output directory (-o DIR), not a .npy file")
    vectors, empty = embed_in_process(embedder, args.input, args.lang)
    vectors = vectors.astype(args.dtype)
    np.save(args.output, vectors)
    print(f"{len(vectors)} sentences ({empty} empty) -> {args.output} ({vectors.shape[1]}-d {args.dtype})")
    return 0


def _dataset_languages(config) -> list[str]:
    from pipelines.dataset import load_manifest

    return load_manifest(config.data_dir)["languages"]


if __name__ == "__main__":
    sys.exit(main())
