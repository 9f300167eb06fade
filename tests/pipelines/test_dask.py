"""The job on Beam's DaskRunner against a real dask.distributed cluster, byte for byte against in-process.

The cluster is a `dask scheduler` and two `dask worker` processes on 127.0.0.1
(ports chosen by the OS; `tests.support.local_dask`), started once for this
module and always stopped, whatever the tests do. Every wait has a deadline.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from core import dataset
from orchestration.cli import main as cli
from pipelines.prepare import run_prepare
from pipelines.runners import DASK_RUNNER, for_cluster, pipeline_options
from tests.support.corpus import SMALL_BOOKS, small_config
from tests.support.local_dask import local_dask_cluster

pytestmark = [pytest.mark.beam, pytest.mark.cluster]
WORKERS = 2
START_S = 60  # the scheduler and both workers up
RUN_S = 100  # one prepare run of the seven short books


@contextlib.contextmanager
def deadline(seconds: float, what: str) -> Iterator[None]:
    """Raise TimeoutError in this (the main) thread when `seconds` have passed."""

    def expire(_signum, _frame):
        raise TimeoutError(f"{what}: still running after {seconds:.0f}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """(scheduler address, folder of the processes' logs) of a scheduler and two 1-thread workers."""
    logs = tmp_path_factory.mktemp("dask")
    with local_dask_cluster(logs, workers=WORKERS, threads=1, start_s=START_S) as address:
        yield address, logs


def worker_logs(logs: Path) -> list[list[str]]:
    """Each worker's log lines so far (a log only grows)."""
    return [(logs / f"worker-{i}.log").read_text().splitlines() for i in range(WORKERS)]


def file_hashes(manifest: dataset.DatasetManifest) -> dict[str, str]:
    """Every shard's and the BPE model's sha256, by the file's name inside the dataset."""
    manifest = manifest.dump()
    out = {
        f["path"].split("/", 1)[-1] if f["path"].startswith("attempt-") else f["path"]: f["sha256"]
        for s in manifest["splits"].values()
        for f in s["files"]
    }
    out["spm.model"] = manifest["spm"]["sha256"]
    return out


@pytest.fixture(scope="module")
def in_process(tmp_path_factory) -> dataset.DatasetManifest:
    """The manifest of the seven short books prepared by the in-process runner."""
    config = small_config(tmp_path_factory.mktemp("in_process"))
    return run_prepare(
        config.prepare, config.data_dir, options=pipeline_options([]), resolved_config=config.to_dict()
    ).manifest


def test_the_cli_runs_prepare_on_dask_and_writes_the_in_process_dataset(dask_cluster, in_process, tmp_path):
    address, logs = dask_cluster
    config = small_config(tmp_path)  # the same overrides, given on the command line below
    overrides = [
        f"run_dir={config.run_dir}",
        f"prepare.sources=[{{kind: bible, books: {SMALL_BOOKS}}}]",
        "prepare.split.dev_size=40",
        "prepare.split.test_size=40",
        "prepare.spm.vocab_size=2000",
        "prepare.output.train_shards=3",
    ]
    before = [len(lines) for lines in worker_logs(logs)]
    with deadline(RUN_S, "interlingua prepare on Dask"):
        assert (
            cli(
                [
                    "prepare",
                    *overrides,
                    "--runner=DaskRunner",
                    f"--dask_client_address={address}",
                    "--dask_connection_timeout=30",
                ]
            )
            == 0
        )
    manifest = dataset.load_manifest(config.data_dir)
    assert file_hashes(manifest) == file_hashes(in_process)
    assert manifest.counts == in_process.counts  # the drop counts add up on Dask too
    assert manifest.fingerprint == in_process.fingerprint
    # the work ran in the worker processes, each step once: every book read once, one BPE model
    # trained (a side input would have recomputed them), every non-empty shard written once
    logged = [line for lines, n in zip(worker_logs(logs), before) for line in lines[n:]]
    assert sorted(
        line.split(" read bible book ")[1].split(":")[0] for line in logged if " read bible book " in line
    ) == [str(b) for b in sorted(SMALL_BOOKS, key=str)]
    assert sum(" trained BPE on " in line for line in logged) == 1
    assert sorted(line.split(" wrote ")[1].split(":")[0] for line in logged if " wrote " in line) == sorted(
        f.path for s in manifest.splits.values() for f in s.files if f.rows
    )


def test_dask_workers_write_a_dataset_at_a_uri_committed_by_its_manifest(dask_cluster, in_process, tmp_path):
    address, _ = dask_cluster
    config = small_config(tmp_path)
    uri = f"file://{tmp_path}/shared/data"  # what an s3:// or gs:// prefix is to a real cluster
    options = pipeline_options(["--runner=DaskRunner", f"--dask_client_address={address}"])
    with deadline(RUN_S, "prepare on Dask to a file:// URI"):
        manifest = run_prepare(config.prepare, uri, options=options, resolved_config=config.to_dict()).manifest
    assert file_hashes(manifest) == file_hashes(in_process)
    assert dataset.read_split(uri, "dev").num_rows == 40


def test_dask_partitions_default_to_the_cluster_threads(dask_cluster):
    address, _ = dask_cluster
    from apache_beam.runners.dask.dask_runner import DaskOptions

    options = pipeline_options(["--runner=DaskRunner", f"--dask_client_address={address}"])
    assert options.view_as(DaskOptions).npartitions is None
    assert for_cluster(options, tasks=7).view_as(DaskOptions).npartitions == WORKERS
    assert for_cluster(options, tasks=1).view_as(DaskOptions).npartitions == 1
    mine = pipeline_options(["--runner=dask", f"--dask_client_address={address}", "--dask_npartitions=5"])
    assert mine.get_all_options()["runner"] == DASK_RUNNER
    assert for_cluster(mine, tasks=7).view_as(DaskOptions).npartitions == 5
