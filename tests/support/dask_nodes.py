"""A dask.distributed cluster of separate processes: `dask scheduler` on the server host and one
`dask worker` per `Node` (in its network namespace when the network has them), each with its own working
directory, TMPDIR and `--local-directory`, and a resource named after its node (`node_a=1`) so a test can
place a task there. tests/local_cluster.py is the same on 127.0.0.1 for the benchmarks, without nodes.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.network import Network, Node
from tests.support.procs import Server, processes_under, spawn, stop_processes, wait_until

START_S = 90


@dataclass
class DaskNode:
    """One `dask` process; `scratch` holds its TMPDIR (`tmp`) and cwd (`work`, also its local directory)."""

    name: str
    ip: str
    resource: str | None
    scratch: Path
    server: Server


@dataclass
class DaskCluster:
    """`address`: the scheduler's (tcp://host:port, for `--dask_client_address`); `scheduler`; `workers`."""

    address: str
    scheduler: DaskNode
    workers: list[DaskNode]
    network: Network


def _start(name: str, args: list[str], root: Path, node: Node | None, env: dict[str, str]) -> DaskNode:
    """`dask <args>` with its scratch folders under root/<name>, on `node` (None: the server host)."""
    scratch = root / name
    for sub in ("tmp", "work"):
        (scratch / sub).mkdir(parents=True)
    dask = str(Path(sys.executable).with_name("dask"))
    server = spawn(
        f"the Dask {args[0]} {name}",
        [dask, *args],
        scratch / "dask.log",
        cwd=scratch / "work",
        env={**env, "TMPDIR": str(scratch / "tmp"), "DASK_LOGGING__PIPELINES": "debug"},
        prefix=node.host_prefix(scratch) if node else (),
    )  # a worker host: a disk of its own
    return DaskNode(name, node.ip if node else "", f"node_{node.name}" if node else None, scratch, server)


def _address(scheduler_file: Path) -> str | None:
    with contextlib.suppress(FileNotFoundError, json.JSONDecodeError, KeyError):
        return json.loads(scheduler_file.read_text())["address"]
    return None


@contextlib.contextmanager
def dask_cluster(
    network: Network, *, env: dict[str, str] | None = None, threads: int = 1, start_s: float = START_S
) -> Iterator[DaskCluster]:
    """The scheduler on `network.host_ip` and a worker on each of `network.nodes`, every one of them
    connected; all stopped and their scratch folders removed when the context ends."""
    from distributed import Client

    root = Path(tempfile.mkdtemp(prefix="ild-"))
    nodes: list[DaskNode] = []
    try:
        scheduler_file = root / "scheduler.json"
        nodes.append(
            _start(
                "scheduler",
                [
                    "scheduler",
                    "--host",
                    network.host_ip,
                    "--port",
                    "0",
                    "--no-dashboard",
                    "--scheduler-file",
                    str(scheduler_file),
                ],
                root,
                None,
                env or {},
            )
        )
        nodes[0].ip = network.host_ip
        address = wait_until(
            lambda: _address(scheduler_file),
            timeout_s=start_s,
            server=nodes[0].server,
            what=f"address in {scheduler_file}",
        )
        for node in network.nodes:
            work = root / node.name / "work"
            nodes.append(
                _start(
                    node.name,
                    [
                        "worker",
                        address,
                        "--host",
                        node.ip,
                        "--nthreads",
                        str(threads),
                        "--no-nanny",
                        "--no-dashboard",
                        "--name",
                        node.name,
                        "--resources",
                        f"node_{node.name}=1",
                        "--death-timeout",
                        "60",
                        "--local-directory",
                        str(work),
                    ],
                    root,
                    node,
                    env or {},
                )
            )
        with Client(address, timeout=start_s) as client:
            for worker in nodes[1:]:
                wait_until(
                    lambda worker=worker: any(
                        w.get("name") == worker.name for w in client.scheduler_info()["workers"].values()
                    ),
                    timeout_s=start_s,
                    server=worker.server,
                    what=f"worker {worker.name} connected",
                )
        yield DaskCluster(address, nodes[0], nodes[1:], network)
    finally:
        for node in reversed(nodes):  # the workers first, while the scheduler can still take their goodbyes
            node.server.stop()
        stop_processes(processes_under(root))
        shutil.rmtree(root, ignore_errors=True)
