"""The commands of the pipeline's stages: prepare, train, evaluate, run, tune. Each is `add_<name>(sub)`,
its flags beside its handler `<name>(config, args) -> exit code`."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from core.errors import Exit, UserError
from core.location import Location
from orchestration.cli.common import command
from orchestration.config import Config, ConfigError

log = logging.getLogger("interlingua")


def add_prepare(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "prepare",
        prepare,
        writes=True,
        locks=True,
        beam=True,
        example="interlingua prepare -c configs/bible6-cpu.yaml prepare.spm.vocab_size=8000 --workers 2",
        help="clean, deduplicate, split, BPE-encode and shard a corpus into Parquet (Apache Beam)",
        description="Run the corpus-preparation Beam job. Unrecognized --flags are Beam pipeline options "
        "(--runner, --flink_master, --project, ...); without --runner the job runs in this process.",
    )
    p.add_argument("--workers", type=int, default=1, help="processes for the in-process runner (default 1)")
    p.add_argument(
        "--force",
        action="store_true",
        help="rebuild even if the dataset is up to date; replace another config's dataset in a shared "
        "dataset_dir (never files interlingua did not write)",
    )


def prepare(config: Config, args: argparse.Namespace) -> int:
    from pipelines.prepare import run_prepare, summary
    from pipelines.runners import pipeline_options

    if args.workers < 1:
        raise ConfigError("--workers must be at least 1")
    result = run_prepare(
        config.prepare,
        config.data_dir,
        options=pipeline_options(args.beam_args, workers=args.workers),
        resolved_config=config.to_dict(),
        force=args.force,
    )
    print(summary(result))
    print(f"dataset: {config.data_dir}")
    return Exit.OK


def add_train(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "train",
        train,
        writes=True,
        locks=True,
        example="interlingua train -c configs/bible6-cpu.yaml train.max_minutes=5",
        help="train the multilingual encoders on the prepared dataset (Ray Train; resumes a stopped run)",
        description="Train with Ray Train on runtime.num_workers workers, on the cluster at "
        "runtime.ray_address or a local one. Rerunning the same config resumes from the last checkpoint.",
    )
    p.add_argument("--force", action="store_true", help="discard this run's checkpoints and start over")


def train(config: Config, args: argparse.Namespace) -> int:
    from orchestration.train.driver import train as train_model

    result = train_model(config, force=args.force)
    verb = "already trained" if result.skipped else "trained"
    error = "n/a" if result.dev_error is None else f"{result.dev_error:.4f}"
    print(f"{verb}: step {result.step}, best dev similarity error {error}")
    print(f"model: {result.model_dir}  (MLflow run {result.run_id})")
    return Exit.OK


def add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "evaluate",
        evaluate,
        writes=True,
        locks=True,
        example="interlingua evaluate -c configs/bible6-cpu.yaml evaluate.split=dev",
        help="similarity-search error of a trained model on the dev or test split (Ray + faiss)",
        description="Embed evaluate.split with a Ray Data actor pool, search every ordered language pair "
        "in evaluate.shards shards with Ray tasks, log the L x L matrix to MLflow; then each of "
        "evaluate.testsets, each its own MLflow run.",
    )
    p.add_argument("--testset", help="evaluate only this evaluate.testsets entry")
    p.add_argument("--model", help="a model directory (default: <run_dir>/train/model)")
    p.add_argument(
        "--force", action="store_true", help="evaluate again even if this model was evaluated on this data and config"
    )


def evaluate(config: Config, args: argparse.Namespace) -> int:
    from orchestration.evaluate.job import evaluate as evaluate_model

    model_dir = Path(args.model) if args.model else None
    names = [args.testset] if args.testset else [None, *(t.name for t in config.evaluate.testsets)]
    for name in names:
        result = evaluate_model(config, model_dir=model_dir, force=args.force, testset=name)
        if len(names) > 1 or args.testset:
            print(f"test set {name}:" if name else f"split {config.evaluate.split}:")
        print(result.format_matrix())
        print(f"tables and heatmap: {result.out_dir}  (MLflow run {result.run_id})")
    return Exit.OK


def add_run(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "run",
        run,
        writes=True,
        beam=True,
        example="interlingua run -c configs/bible6-cpu.yaml --wait   # in a crontab; exit codes as above",
        help="prepare -> train -> evaluate -> register, skipping unchanged stages (for cron and schedulers)",
        description="Exit codes: 0 trained and promoted, 3 nothing to do, 4 trained but not promoted, "
        "5 another run holds the lock, 1 failed, 2 bad configuration or input, 130 interrupted. "
        "Unrecognized --flags go to the Beam job.",
    )
    p.add_argument("--wait", action="store_true", help="wait for a running job instead of exiting with 5")


def run(config: Config, args: argparse.Namespace) -> int:
    from orchestration.adapters import tracking
    from orchestration.adapters.lock import AlreadyRunning
    from orchestration.lifecycle.run import run_pipeline

    try:
        outcome = run_pipeline(config, wait=args.wait, beam_args=args.beam_args)
    except AlreadyRunning as exc:
        print(f"interlingua run: {exc}", file=sys.stderr)
        return Exit.ALREADY_RUNNING
    except (UserError, ConnectionError, KeyboardInterrupt):
        raise  # one line, as for every command
    except Exception:  # noqa: BLE001 - a scheduler needs the exit code; the traceback goes to the log
        log.exception("interlingua run failed")
        return Exit.FAILED
    print(outcome.matrix)
    print(" ".join(f"{stage}: {state}" for stage, state in outcome.stages.items()))
    print(outcome.message)
    print(f"MLflow pipeline run {outcome.run_id}; {tracking.how_to_browse(config.tracking.uri)}")
    return outcome.code


def add_tune(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "tune",
        tune,
        writes=True,
        locks=True,
        example="interlingua tune -c configs/bible6-cpu.yaml --space configs/tune/bible6-cpu.yaml",
        help="search hyperparameters with Ray Tune (ASHA); writes the best trial's config",
        description="Each trial is a training run of the config plus its sampled keys, nested under one "
        "MLflow tune run; weak trials stop early. Rerunning the same command resumes the search.",
    )
    p.add_argument("--space", required=True, help="the search space (YAML: space, num_samples, scheduler)")


def tune(config: Config, args: argparse.Namespace) -> int:
    from orchestration.train.search_space import load_space
    from orchestration.train.tune import tune as tune_search

    result = tune_search(config, load_space(args.space), space_path=args.space)
    print(f"{result.trials} trials; best dev similarity error {result.best_error:.4f}")
    print(f"best config: {result.best_config}  (MLflow tune run {result.run_id})")
    if not Location.of(result.best_config).on_this_host:  # a config file is read from this host
        print(f"next: copy {result.best_config} here, then interlingua run -c best.yaml")
    else:
        print(f"next: interlingua run -c {result.best_config}")
    return Exit.OK
