"""The `interlingua` command line.

    interlingua prepare --config configs/bible6.yaml prepare.spm.vocab_size=8000
    interlingua prepare --workers 2                       # Beam in 2 processes
    interlingua prepare --runner=FlinkRunner --flink_master=host:8081   # any Beam flags
    interlingua train --config configs/bible6-cpu.yaml    # Ray Train; resumes a stopped run
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

from orchestration.config import ConfigError, load_config

log = logging.getLogger("interlingua")

_OVERRIDE = re.compile(r"^[A-Za-z_][\w]*(\.[\w]+)*=")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="interlingua",
        description="Learn language-independent sentence embeddings from N-way parallel corpora.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging, Beam's included")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--config", "-c", help="run config (YAML); schema defaults when omitted")
        p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                       help="config overrides, e.g. prepare.spm.vocab_size=8000")
        return p

    prep = with_config(sub.add_parser(
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
    trn = with_config(sub.add_parser(
        "train",
        help="train the multilingual encoders on the prepared dataset (Ray Train; resumes a stopped run)",
        description="Train with Ray Train on train.num_workers workers, on the cluster at "
        "train.ray_address or a local one. Rerunning the same config resumes from the last checkpoint.",
    ))
    trn.add_argument("--force", action="store_true", help="discard this run's checkpoints and start over")
    with_config(sub.add_parser("config", help="print the resolved configuration as YAML"))
    return parser


def _user_errors() -> tuple[type[Exception], ...]:
    from pipelines.dataset import DatasetError
    from pipelines.sources import SourceError
    from pipelines.split import HeldOutError

    from orchestration.train import TrainError

    return (ConfigError, SourceError, HeldOutError, DatasetError, TrainError)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args, unknown = _parser().parse_known_args(argv)
    bad = [a for a in unknown if not a.startswith("-")]
    beam_args = [a for a in unknown if a.startswith("-")]
    overrides = list(args.overrides)
    for arg in bad:
        # a value that followed a Beam flag ("--job_endpoint embed") belongs to Beam
        (overrides if _OVERRIDE.match(arg) else beam_args).append(arg)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    if not args.verbose:
        logging.getLogger("apache_beam").setLevel(logging.WARNING)
    _USER_ERRORS = _user_errors()
    try:
        config = load_config(args.config, overrides)
        if args.command == "config":
            from pipelines.config import dump_yaml

            print(dump_yaml(config.to_dict()), end="")
            return 0
        if beam_args and args.command != "prepare":
            raise ConfigError(f"unknown arguments: {' '.join(beam_args)}")
        if args.command == "train":
            return _train(config, args)
        return _prepare(config, args, beam_args)
    except _USER_ERRORS as exc:
        print(f"interlingua {args.command}: error: {exc}", file=sys.stderr)
        return 2


def _prepare(config, args: argparse.Namespace, beam_args: list[str]) -> int:
    from pipelines.prepare import pipeline_options, run_prepare, summary

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
    from orchestration.train import train

    result = train(config, force=args.force)
    verb = "already trained" if result.skipped else "trained"
    error = "n/a" if result.dev_error is None else f"{result.dev_error:.4f}"
    print(f"{verb}: step {result.step}, best dev similarity error {error}")
    print(f"model: {result.model_dir}  (MLflow run {result.run_id})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
