"""A worker process of `prepare --workers N` (`pipelines.runners.WorkerProcessesRunner`): Beam's SDK harness,
with the command's logging set before Beam logs its first line.

Beam's own worker command (`python -m apache_beam.runners.worker.sdk_worker_main`, multi_processing mode) logs
with a handler of Python's default making: a library's import-time `logging.warning` installs it, and the
harness sets the root logger to INFO before it reads any option, so every worker printed ~15 lines of its
channels and start-up on the command's stderr, and the FnApiRunner hands its workers none of the pipeline's
options (`--default_sdk_harness_log_level` does not reach them, Beam 2.77). The verbosity comes from the
command (`INTERLINGUA_VERBOSITY`, set by `orchestration.adapters.logs.configure`, inherited): with -v the
harness runs as Beam's own does. No Beam import at module level: Beam logs while it is imported.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys

ENV = "INTERLINGUA_VERBOSITY"  # orchestration.adapters.logs.ENV: the command's level, -1 quiet, 0, 1 verbose
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # orchestration.adapters.logs.FORMAT
COMMAND = f"{shlex.quote(sys.executable)} -m pipelines.sdk_worker"  # run by a shell, as Beam's own


def _verbosity() -> int:
    try:
        return int(os.environ.get(ENV, 0))
    except ValueError:
        return 0


def configure_logging(level: int) -> None:
    """Below -v (`level` < 1): our lines on stderr in the command's format (warnings only when quiet),
    Beam's own below ERROR dropped, and a library's line on the root logger below ERROR dropped (ours
    never log there: `apitools not found`, logged by Beam's GCP modules at import)."""
    if level >= 1:
        return
    handler = logging.StreamHandler()  # the handler level holds: the harness resets the root logger's
    handler.setFormatter(logging.Formatter(FORMAT, datefmt="%H:%M:%S"))
    handler.setLevel(logging.WARNING if level < 0 else logging.INFO)
    handler.addFilter(lambda record: record.name != "root" or record.levelno >= logging.ERROR)
    logging.getLogger().addHandler(handler)
    logging.getLogger("apache_beam").setLevel(logging.ERROR)


def main() -> None:
    """Run Beam's SDK harness (`sdk_worker_main`, told its channels by the runner's environment variables)."""
    configure_logging(_verbosity())
    from apache_beam.runners.worker import sdk_worker_main

    sdk_worker_main.main(sys.argv)


if __name__ == "__main__":
    main()
