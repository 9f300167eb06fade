"""What an operator sees: the one place that configures logging, here and in Ray's workers.

Three levels. `QUIET` (`--quiet`): warnings and errors only, and the command's result on
stdout. `DEFAULT`: our own stage lines (start, end, counts, progress) and warnings when
something is wrong. `VERBOSE` (`-v`): debug lines and every library's chatter.

By default the known chatter is silenced at its source, by logger level: faiss's loader
trying AVX512/AVX2 builds, Beam's notes on missing GCS/BigQuery clients, MLflow's table
creation, matplotlib's font cache, Ray's start-up lines and Ray Data's and Ray Train's INFO logs
(reports, checkpoints); one known line of Ray's C++ core in its workers' output by Ray's own
setting (`RAY_WORKER_NOISE`), and in this process's own stderr by `native_stderr`. The level
travels in `INTERLINGUA_VERBOSITY`, which local Ray workers and subprocesses inherit (Beam's
worker processes of `prepare --workers N`: `pipelines.sdk_worker`); a Ray Train worker is told it by its loop config
(`configure_worker`).
"""

from __future__ import annotations

import logging
import os
import re
import sys

QUIET, DEFAULT, VERBOSE = -1, 0, 1
ENV = "INTERLINGUA_VERBOSITY"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Libraries' loggers and the level they keep unless -v.
_LIBRARY_LEVELS = {
    "faiss.loader": logging.WARNING,  # nine INFO lines trying the AVX512/AVX2 builds
    "apache_beam": logging.ERROR,  # GCS/BigQuery client libraries missing, runner notes
    "mlflow": logging.WARNING,  # "Creating initial MLflow database tables..."
    "alembic": logging.WARNING,  # MLflow's schema migrations
    "py3langid": logging.WARNING,
    "matplotlib": logging.WARNING,  # "generated new fontManager", once per cache folder (evaluate's heatmap)
}
# Logged on the root logger by a library at import (apache_beam.io.gcp): not ours to raise the level of.
_ROOT_NOISE = ("apitools not found",)


class _DropLibraryNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "root" and str(record.msg).startswith(_ROOT_NOISE))


class _DropInterruptEcho(logging.Filter):
    """Beam logs a KeyboardInterrupt raised inside a transform as an ERROR with its traceback; the
    command reports the interrupt in one line of its own, so the echo goes (kept with -v)."""

    def filter(self, record: logging.LogRecord) -> bool:
        interrupted = record.exc_info is not None and record.exc_info[0] is KeyboardInterrupt
        return not (interrupted or str(record.msg).startswith("KeyboardInterrupt"))


class _NoEscapeCodes(logging.Filter):
    """Drops the colour codes a library puts in its own messages (Ray's dashboard URL, with -v)."""

    CODES = re.compile(r"\x1b\[[0-9;]*m")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "\x1b[" in message:
            record.msg, record.args = self.CODES.sub("", message), None
        return True


def verbosity() -> int:
    """The level set by `configure` in this process or the process that started it (DEFAULT if none)."""
    try:
        return int(os.environ.get(ENV, DEFAULT))
    except ValueError:
        return DEFAULT


def configure(level: int) -> None:
    """Set up logging for a command run at `level` (QUIET, DEFAULT or VERBOSE)."""
    os.environ[ENV] = str(level)
    logging.basicConfig(format=FORMAT, datefmt="%H:%M:%S")  # no-op where a handler exists (pytest's)
    logging.getLogger().setLevel({QUIET: logging.WARNING, DEFAULT: logging.INFO}.get(level, logging.DEBUG))
    _quiet_libraries(level)
    if not (sys.stdout.isatty() and sys.stderr.isatty()):
        # Ray colours the "(RayTrainWorker pid=...)" prefix of the workers' lines it prints here
        # whatever the output is: in a log file those are escape codes. Read at every line printed;
        # a user's own setting wins.
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")


def configure_worker(level: int) -> None:
    """The same inside a Ray Train worker, whose root logger Ray Train has already set up."""
    os.environ[ENV] = str(level)
    logging.getLogger().setLevel(logging.WARNING if level <= QUIET else logging.INFO)
    _quiet_libraries(level)
    if level < VERBOSE:
        # Ray Train 2.60 logs a `TrainingReport(...)` repr per checkpoint on a logger named by its
        # file's path, outside `ray.train`, so LoggingConfig(log_level) does not reach it
        from ray.train.v2._internal.execution import context

        logging.getLogger(context.__file__).setLevel(logging.WARNING)


def _quiet_libraries(level: int) -> None:
    if level >= VERBOSE:
        return
    for name, library_level in _LIBRARY_LEVELS.items():
        logging.getLogger(name).setLevel(library_level)
    beam = logging.getLogger("apache_beam.runners.common")
    if not any(isinstance(f, _DropInterruptEcho) for f in beam.filters):
        beam.addFilter(_DropInterruptEcho())
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _DropLibraryNoise) for f in handler.filters):
            handler.addFilter(_DropLibraryNoise())
    # read when the library is imported (here or in a Ray worker), over its own logging config
    os.environ.setdefault("RAY_DATA_LOG_LEVEL", "WARNING")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("RAY_DEDUP_LOGS_SKIP_REGEX", RAY_WORKER_NOISE)


# The lines of Ray's workers that this driver prints are dropped when they match Ray's documented
# `RAY_DEDUP_LOGS_SKIP_REGEX` (read when Ray is imported; a user's own setting wins). Ray's C++ core writes
# them to the worker's stderr, which no logger of ours reaches and no level of Ray's holds back:
# `RAY_BACKEND_LOG_LEVEL` prints a line of its own in every process that reads it. ray-project/ray#53727, an
# actor created with its arguments in the object store (Ray Train's controller creates one at every training):
# a note to Ray's developers, about no work of the user's. The same line in this driver's own output (Ray
# Data's actor pools, created here) is written by its C++ core straight to the process's stderr descriptor:
# held back there by the `interlingua` program's filter (`native_stderr`).
RAY_WORKER_NOISE = r"core_worker\.cc:\d+: Actor with class name: .* has constructor arguments in the object store"


def plain_ray_output() -> None:
    """No colour in what Ray prints on this process when its output is not a terminal (see `configure`):
    its own logger's messages lose their codes, and its " [repeated Nx across cluster]" marker, coloured
    by Ray 2.x with no setting to turn it off, is made plain (were `_color` renamed, the marker alone
    would keep its colour)."""
    if os.environ.get("RAY_COLOR_PREFIX") != "0":
        return
    from orchestration.adapters.ray_private import plain_repeat_marker

    plain_repeat_marker()
    for handler in logging.getLogger("ray").handlers:  # Ray's own handler: it does not propagate to ours
        if not any(isinstance(f, _NoEscapeCodes) for f in handler.filters):
            handler.addFilter(_NoEscapeCodes())


def ray_logging_level() -> int:
    """`ray.init(logging_level=...)`: Ray's own driver lines (cluster start, token auth notice) only for -v."""
    return logging.INFO if verbosity() >= VERBOSE else logging.ERROR


def ray_train_log_level() -> str:
    """Ray Train's `LoggingConfig(log_level=...)`: its reports, checkpoints and worker-group lines for -v."""
    return "INFO" if verbosity() >= VERBOSE else "WARNING"
