"""A Ray cluster of separate nodes started with `ray start`: a head on the server host and one worker node
per `Node` (in its network namespace when the network has them).

Each node has its own `--temp-dir`, working directory and TMPDIR under a short folder in /tmp (Ray's unix
socket paths must stay under 107 bytes, which pytest's folders overrun), and ports chosen free here rather
than Ray's defaults, so it never meets another Ray on the machine. Each worker node carries a custom resource
named after it (`node_a: 1`) so a test can place work there. Stopping signals the nodes' own process groups
only: never `ray stop`, which would stop every Ray on the machine.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.network import Network, Node
from tests.support.procs import (
    ClusterStartError,
    Server,
    family,
    free_port,
    free_port_range,
    log_tail,
    processes_under,
    spawn,
    stop_processes,
    wait_until,
)

START_S = 120  # the head, then every worker node registered with it
WORKER_PORTS = 40  # ports for a node's Ray worker processes
WORKER_RESOURCE = "worker_node"  # every worker node has one, the head none (runtime.train_resources)
STOP_S = 5  # SIGTERM's grace before SIGKILL: nothing of a test node needs saving


@dataclass
class RayNode:
    """One `ray start --block` process; `scratch` holds its temp dir (`ray`), TMPDIR (`tmp`) and cwd (`work`)."""

    name: str
    ip: str
    resource: str | None  # the custom resource only this node has (None on the head)
    scratch: Path
    server: Server
    command: list[str]  # what started it (`RayCluster.restart` runs it again)
    env: dict[str, str]
    prefix: list[str]

    def raylet_pid(self) -> int | None:
        """The pid of this node's raylet, if it runs."""
        import psutil

        try:
            children = psutil.Process(self.server.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return None
        return next((c.pid for c in children if c.name() == "raylet"), None)

    def kill_raylet(self) -> int:
        """SIGKILL this node's raylet (the node dies as a host would); returns its pid."""
        import os

        pid = self.raylet_pid()
        if pid is None:
            raise AssertionError(f"Ray node {self.name} has no raylet running")
        os.kill(pid, signal.SIGKILL)
        return pid


@dataclass
class RayCluster:
    """`address`: the GCS address (`runtime.ray_address`, `ray.init(address=...)`); `head`; `workers`."""

    address: str
    head: RayNode
    workers: list[RayNode]
    network: Network

    def node(self, name: str) -> RayNode:
        return next(n for n in self.workers if n.name == name)

    def restart(self, name: str, *, start_s: float = START_S) -> RayNode:
        """Start worker node `name` again as it was first started (after `kill_raylet`, a host coming back):
        whatever is left of it is stopped first; returns once the head counts it alive.

        It starts again only once the GCS has marked the killed node dead, as it would have a rebooting
        host's: a raylet started again on the same address and ports answers the GCS's health checks for
        the dead one, which then stays alive with its resources, and work placed on it waits forever."""
        node = self.node(name)
        node.server.stop()
        _wait_dead(self.address, node, self.head.server, start_s)
        node.server = _respawn(node)
        _start_registered(self.address, node, self.head.server, start_s)
        return node

    def alive_nodes(self) -> list[dict]:
        """{'ip', 'resources'} of every node the GCS counts alive."""
        return alive_nodes(self.address)


def alive_nodes(address: str) -> list[dict]:
    """Ask the GCS directly (Ray's own `ray status` does the same), so that no driver joins the cluster."""
    from ray._raylet import GcsClient

    out = []
    for info in GcsClient(address=address).get_all_node_info(timeout=5).values():
        if info.state == 0:  # GcsNodeInfo.ALIVE
            out.append({"ip": info.node_manager_address, "resources": dict(info.resources_total)})
    return out


def _gloo(env: dict[str, str], ifname: str) -> dict[str, str]:
    """Torch's Gloo finds its address by resolving the hostname, which every namespace here shares (and which
    names none of their addresses): name the node's interface, as a host with several interfaces must."""
    return {**env, "GLOO_SOCKET_IFNAME": ifname}


def _wait_registered(address: str, node: RayNode, start_s: float) -> None:
    wait_until(
        lambda: any(node.resource in n["resources"] for n in alive_nodes(address)),
        timeout_s=start_s,
        server=node.server,
        what=f"node {node.name} ({node.ip}) registered with the head",
    )


RAY_STARTUP_TIMEOUT = "The current node timed out during startup"  # ray._private.node, after its fixed 30 s


def _start_registered(address: str, node: RayNode, head: Server, start_s: float) -> None:
    """Wait for worker node `node` to register with the head. `ray start` gives its raylet a fixed 30 s to
    register and exits when a loaded machine overruns them: then the node is stopped, marked dead by the GCS,
    and started again the same way, until `start_s` has passed (a slow machine is slower, not red)."""
    deadline = time.monotonic() + start_s
    while True:
        try:
            _wait_registered(address, node, max(1.0, deadline - time.monotonic()))
            return
        except ClusterStartError:
            exited_slow = node.server.process.poll() is not None and RAY_STARTUP_TIMEOUT in log_tail(node.server.log)
            if not exited_slow or time.monotonic() >= deadline:
                raise
        node.server.stop()
        _wait_dead(address, node, head, max(1.0, deadline - time.monotonic()))
        node.server = _respawn(node)


def _wait_dead(address: str, node: RayNode, head: Server, start_s: float) -> None:
    """Until the GCS no longer counts `node` alive: a raylet started again on the same address and ports
    answers the GCS's health checks for the dead one, which then stays alive with its resources."""
    wait_until(
        lambda: not any(node.resource in n["resources"] for n in alive_nodes(address)),
        timeout_s=start_s,
        server=head,
        what=f"node {node.name} ({node.ip}) marked dead",
    )


def _respawn(node: RayNode) -> Server:
    """`node` started again as it was first started."""
    return spawn(
        f"the Ray node {node.name}",
        node.command,
        node.scratch / "ray-start.log",
        cwd=node.scratch / "work",
        env=node.env,
        prefix=node.prefix,
    )


def _ray_args(node_ip: str, scratch: Path, num_cpus: int, object_store_mb: int) -> list[str]:
    first = free_port_range("127.0.0.1", WORKER_PORTS)
    ports = {
        flag: free_port()
        for flag in (
            "--node-manager-port",
            "--object-manager-port",
            "--dashboard-agent-listen-port",
            "--dashboard-agent-grpc-port",
            "--metrics-export-port",
            "--runtime-env-agent-port",
        )
    }
    return [
        str(Path(sys.executable).with_name("ray")),
        "start",
        "--block",
        "--disable-usage-stats",
        "--node-ip-address",
        node_ip,
        "--temp-dir",
        str(scratch / "ray"),
        "--num-cpus",
        str(num_cpus),
        "--num-gpus",
        "0",
        "--object-store-memory",
        str(object_store_mb * 2**20),
        "--min-worker-port",
        str(first),
        "--max-worker-port",
        str(first + WORKER_PORTS - 1),
        *(str(x) for item in ports.items() for x in item),
    ]


def _start_node(
    name: str, ip: str, args: Sequence[str], root: Path, env: dict[str, str], node: Node | None, resource: str | None
) -> RayNode:
    scratch = root / name
    for sub in ("ray", "tmp", "work"):
        (scratch / sub).mkdir(parents=True, exist_ok=True)
    env = {**env, "TMPDIR": str(scratch / "tmp")}
    prefix = node.host_prefix(scratch) if node else []  # a worker host: a disk of its own
    server = spawn(
        f"the Ray node {name}", list(args), scratch / "ray-start.log", cwd=scratch / "work", env=env, prefix=prefix
    )
    return RayNode(name, ip, resource, scratch, server, list(args), env, prefix)


@contextlib.contextmanager
def ray_cluster(
    network: Network,
    *,
    env: dict[str, str] | None = None,
    head_cpus: int = 1,
    worker_cpus: int = 1,
    object_store_mb: int = 256,
    start_s: float = START_S,
) -> Iterator[RayCluster]:
    """A head on `network.host_ip` and a worker node on each of `network.nodes`; all stopped and their scratch
    folders removed when the context ends. ClusterStartError (with the log's tail) if a node is not up in time."""
    # Ray turns token authentication on for a node on a non-loopback address and reads the token from
    # ~/.ray (shared with every other Ray user of the machine); this private test network opts out, so that
    # drivers need nothing but the address
    env = {**(env or {}), "RAY_AUTH_MODE": "disabled"}
    root = Path(tempfile.mkdtemp(prefix="ilr-"))
    nodes: list[RayNode] = []
    try:
        port = free_port(network.host_ip)
        address = f"{network.host_ip}:{port}"
        head_args = [
            *_ray_args(network.host_ip, root / "head", head_cpus, object_store_mb),
            "--head",
            "--port",
            str(port),
            "--include-dashboard",
            "false",
            "--ray-client-server-port",
            str(free_port()),
        ]
        head = _start_node("head", network.host_ip, head_args, root, _gloo(env, network.host_ifname), None, None)
        nodes.append(head)
        wait_until(lambda: alive_nodes(address), timeout_s=start_s, server=head.server, what=f"GCS on {address}")
        for node in network.nodes:
            resource = f"node_{node.name}"
            args = [
                *_ray_args(node.ip, root / node.name, worker_cpus, object_store_mb),
                "--address",
                address,
                "--resources",
                json.dumps({resource: 1, WORKER_RESOURCE: 1}),
            ]
            nodes.append(_start_node(node.name, node.ip, args, root, _gloo(env, node.ifname), node, resource))
            _start_registered(address, nodes[-1], head.server, start_s)
        yield RayCluster(address, head, nodes[1:], network)
    finally:
        # the workers (together: each takes seconds to wind down) before the head, which hears them leave
        workers, head_only = nodes[1:], nodes[:1]
        stop_processes([p for node in workers for p in family(node.server.process.pid)], STOP_S)
        stop_processes(
            [p for node in head_only for p in family(node.server.process.pid)] + processes_under(root), STOP_S
        )
        shutil.rmtree(root, ignore_errors=True)
