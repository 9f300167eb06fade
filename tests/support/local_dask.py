"""A dask.distributed cluster on this machine as separate processes: one `dask scheduler`, N `dask worker`s.

For the tests and the benchmark of `--runner=DaskRunner`, and for trying it
before a real cluster. Everything listens on 127.0.0.1 on ports the OS picks;
the processes are stopped when the context ends, however it ends.

    with local_dask_cluster(Path("logs")) as address:
        interlingua prepare ... --runner=DaskRunner --dask_client_address=<address>
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # where `import pipelines` works from


@contextlib.contextmanager
def local_dask_cluster(log_dir: Path, *, workers: int = 2, threads: int = 1, start_s: float = 60) -> Iterator[str]:
    """Start a scheduler and `workers` worker processes of `threads` threads each; yield the scheduler address.

    Their logs go to `log_dir` (the workers' include this package's INFO and DEBUG lines).
    Raises RuntimeError (naming the log) if a process exits or the cluster is not up within `start_s`.
    """
    from distributed import Client

    dask = Path(sys.executable).with_name("dask")
    if not dask.exists():
        raise RuntimeError(f"{dask}: no dask CLI beside this Python; pip install dask distributed (see setup.cfg)")
    log_dir.mkdir(parents=True, exist_ok=True)
    until = time.monotonic() + start_s
    processes: list[subprocess.Popen] = []
    try:
        processes.append(
            _spawn(
                [
                    str(dask),
                    "scheduler",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--no-dashboard",
                    "--scheduler-file",
                    str(log_dir / "scheduler.json"),
                    "--idle-timeout",
                    "600",
                ],
                log_dir / "scheduler.log",
            )
        )
        address = _scheduler_address(log_dir / "scheduler.json", processes[0], until)
        for i in range(workers):
            processes.append(
                _spawn(
                    [
                        str(dask),
                        "worker",
                        address,
                        "--host",
                        "127.0.0.1",
                        "--nthreads",
                        str(threads),
                        "--no-nanny",
                        "--no-dashboard",
                        "--name",
                        f"worker-{i}",
                        "--death-timeout",
                        "60",
                        "--local-directory",
                        str(log_dir / f"worker-{i}"),
                    ],
                    log_dir / f"worker-{i}.log",
                )
            )
        try:
            with Client(address, timeout=max(until - time.monotonic(), 1)) as client:
                client.wait_for_workers(workers, timeout=max(until - time.monotonic(), 1))
        except (OSError, TimeoutError) as exc:
            raise RuntimeError(
                f"the local Dask cluster did not come up in {start_s:.0f}s ({exc}); see the logs in {log_dir}"
            ) from exc
        yield address
    finally:
        _stop(processes)


def _spawn(args: list[str], log: Path) -> subprocess.Popen:
    path = os.environ.get("PYTHONPATH", "")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(PACKAGE_ROOT), path) if p),
        "DASK_LOGGING__PIPELINES": "debug",
    }  # one line per read task and shard, in the log files
    with open(log, "wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=log.parent)


def _scheduler_address(scheduler_file: Path, scheduler: subprocess.Popen, until: float) -> str:
    while time.monotonic() < until:
        if scheduler.poll() is not None:
            raise RuntimeError(
                f"the Dask scheduler exited with {scheduler.returncode}; see "
                f"{scheduler_file.with_name('scheduler.log')}"
            )
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError, KeyError):
            return json.loads(scheduler_file.read_text())["address"]
        time.sleep(0.1)
    raise RuntimeError(f"the Dask scheduler wrote no {scheduler_file} in time; see its scheduler.log")


def _stop(processes: list[subprocess.Popen]) -> None:
    """The workers first, while the scheduler can still take their goodbyes (else each waits on it),
    then the scheduler; whatever is still up after 10 s is killed."""
    for group in (processes[1:], processes[:1]):
        for process in group:
            process.terminate()
        for process in group:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
