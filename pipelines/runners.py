"""Beam runner options: the in-process default, and Beam's DaskRunner on a dask.distributed cluster.

`interlingua prepare` passes every flag that is not its own to Beam, so any
runner's flags work; `--runner=DaskRunner --dask_client_address=host:8786`
runs the job on a Dask cluster. What the job needs there (Beam 2.77): see
`pipelines.counting` (one output per DoFn, counts from `process`) and
`pipelines.joins` (no side inputs recomputed per task).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms.environments import SubprocessSDKEnvironment

from pipelines import sdk_worker
from pipelines.errors import BeamOptionError

log = logging.getLogger(__name__)

DEFAULT_RUNNER = "FnApiRunner"
PROCESSES_RUNNER = "pipelines.runners.WorkerProcessesRunner"  # `workers > 1`
DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"


def pipeline_options(beam_args: list[str], *, workers: int = 1) -> PipelineOptions:
    """Beam options: any runner's flags pass through; Beam's in-process runner otherwise.

    The in-process runner is named explicitly: `DirectRunner` would first try to
    fetch the Prism runner binary. `workers > 1` runs it in that many processes
    (`WorkerProcessesRunner`; multi_threading was seen losing rows). `--runner=DaskRunner`
    is Beam's DaskRunner, which Beam 2.77 knows only by its module path; its flags
    (`--dask_client_address=host:8786`, ...) pass through like any other.
    """
    options = PipelineOptions(beam_args)
    if not any(a == "--runner" or a.startswith("--runner=") for a in beam_args):
        extra: dict[str, str | int] = {"runner": DEFAULT_RUNNER}
        if workers > 1:
            extra.update(runner=PROCESSES_RUNNER, direct_num_workers=workers)
        options = PipelineOptions(beam_args, **extra)
    standard = options.view_as(StandardOptions)
    if (standard.runner or "").lower() in ("dask", "daskrunner"):
        standard.runner = DASK_RUNNER
    _check_runner(standard.runner)
    return options


class WorkerProcessesRunner(FnApiRunner):
    """Beam's in-process runner with `--direct_num_workers` worker processes, as its multi_processing mode,
    each started as `pipelines.sdk_worker` (Beam's harness with the command's logging) instead of Beam's own
    command, whose workers print their start-up on the command's output whatever its verbosity.

    The running mode stays `in_memory`: multi_processing would put Beam's command back (Beam 2.77,
    `FnApiRunner.run_pipeline`), and the mode only picks the environment; the worker count alone makes the
    parallelism. Beam logs, seeing several workers in that mode, a warning that they would not run in parallel:
    below `apache_beam`'s level, but with -v; they do.
    """

    def __init__(self) -> None:
        super().__init__(default_environment=SubprocessSDKEnvironment.from_command_string(sdk_worker.COMMAND))


def _check_runner(name: str | None) -> None:
    """BeamOptionError for a runner Beam does not know, before any work (Beam names it only at run time); no
    runner named: Beam's default, nothing to check."""
    from apache_beam.runners.runner import create_runner

    if name is None:
        return
    try:
        create_runner(name)
    except (ValueError, ImportError) as exc:
        raise BeamOptionError(f"--runner={name}: {str(exc).splitlines()[0]}") from None


def for_cluster(options: PipelineOptions, *, tasks: int) -> PipelineOptions:
    """On Dask, a copy of `options` with as many partitions as the cluster has worker threads
    (at most `tasks`), unless `--dask_npartitions` or `--dask_partition_size` is given.
    Other runners' options come back unchanged.

    Beam 2.77's DaskRunner cuts the job's first collection (the read tasks) into
    partitions of 128, every later step keeps them, and Reshuffle does nothing
    there: a few dozen read tasks would run in one worker. More partitions than
    threads cost more than they give: every Flatten adds its inputs' partitions
    together and every shuffle grows with their square (the 6-language Bible on
    2 workers: 60 s with 1 partition, 55 s with 2, 78 s with 4, 112 s with 8).
    """
    if (options.view_as(StandardOptions).runner or "") != DASK_RUNNER:
        return options
    from apache_beam.runners.dask.dask_runner import DaskOptions

    dask = options.view_as(DaskOptions)
    if dask.npartitions or dask.partition_size or not (dask.address or dask.scheduler_file):
        return options  # the user's choice, or Beam starts a local cluster and partitions for it
    threads = _cluster_threads(dask)
    options = copy.deepcopy(options)
    options.view_as(DaskOptions).npartitions = max(1, min(threads, tasks))
    log.info(
        "Dask: %d worker threads, %d read tasks -> --dask_npartitions=%d",
        threads,
        tasks,
        options.view_as(DaskOptions).npartitions,
    )
    return options


def release(pipeline: Any) -> None:
    """Close what a finished (or failed) run left connected: Beam 2.77's DaskRunner keeps its
    dask.distributed Client open after the job, which then keeps reconnecting to a scheduler
    that may be gone; closing it also lets the scheduler cancel a failed job's other tasks."""
    client = getattr(getattr(pipeline, "result", None), "client", None)
    if client is not None:
        client.close()


def _cluster_threads(dask: PipelineOptions) -> int:
    from distributed import Client

    where = dask.address or dask.scheduler_file
    kwargs = {"timeout": dask.timeout} if isinstance(dask.timeout, int) else {}
    try:
        with Client(address=dask.address, scheduler_file=dask.scheduler_file, **kwargs) as client:
            return sum(client.nthreads().values())
    except OSError as exc:
        raise OSError(
            f"--dask_client_address/--dask_scheduler_file {where}: cannot reach the Dask "
            f"scheduler ({exc}); start it (`dask scheduler`) or fix the address"
        ) from exc
