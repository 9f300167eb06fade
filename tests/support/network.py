"""Where the test cluster's nodes live: network namespaces with addresses of their own on one bridge, as
separate hosts would be, or (without root or `ip netns`) plain processes on 127.0.0.1.

With namespaces, the host side of the bridge (10.231.N.1) is the "server host": the S3 server, the
tracking server, the Ray head and the Dask scheduler listen there, and the driver runs there. Each worker
node (10.231.N.10, .11, ...) reaches them over the bridge and cannot see the host's loopback, so an
address that only works on one machine (127.0.0.1, localhost) fails there as it would on a cluster.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

SUBNET = "10.231"  # 10.231.N.0/24, N picked free when the bridge is made (several test runs may share a machine)


@dataclass(frozen=True)
class Node:
    """A worker host: its name, its address and the interface that has it, and the command prefix that runs a
    process there."""

    name: str
    ip: str
    ifname: str = "lo"
    netns: str | None = None

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns] if self.netns else []

    def host_prefix(self, scratch: Path) -> list[str]:
        """The prefix that runs a process on this host with a disk of its own, as a separate machine has: in
        its network namespace and in a mount namespace of its own, where /tmp and /root are empty (the
        driver's files, the other nodes' scratch and the shared home are out of sight) but for `scratch`,
        the Python installation, the venv and the code, which are bound back at their paths (a checkout
        under /tmp, as a fresh clone may be, stays reachable). Without namespaces, `prefix`."""
        if not self.netns:
            return self.prefix
        from tests.support.procs import PACKAGE_ROOT

        keep = dict.fromkeys([str(scratch), sys.base_prefix, sys.prefix, str(PACKAGE_ROOT)])
        return [
            *self.prefix,
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            _OWN_DISK,
            "own-disk",
            *keep,
            "--",
        ]


# In the new mount namespace (private: nothing mounted here reaches the host): keep the paths given before `--`
# reachable through a tmpfs on /mnt while an empty tmpfs covers /tmp and /root, bind each back at its own path,
# then run the command after `--`.
_OWN_DISK = """set -e
keep=""
while [ "$1" != "--" ]; do keep="$keep $1"; shift; done
shift
mount -t tmpfs tmpfs /mnt
for cover in /tmp /root; do
  n=0
  for path in $keep; do
    n=$((n + 1))
    case "$path" in "$cover"/*) mkdir -p "/mnt/keep$cover$n"; mount --bind "$path" "/mnt/keep$cover$n";; esac
  done
  mount -t tmpfs -o mode=1777 tmpfs "$cover"
  n=0
  for path in $keep; do
    n=$((n + 1))
    case "$path" in "$cover"/*)
      mkdir -p "$path"; mount --bind "/mnt/keep$cover$n" "$path"; umount "/mnt/keep$cover$n";;
    esac
  done
done
exec "$@"
"""


@dataclass(frozen=True)
class Network:
    """`host_ip` (on interface `host_ifname`): where servers listen and the driver runs; `nodes`: the worker
    hosts; `isolated`: whether the nodes are network namespaces (else processes on 127.0.0.1, and `why_not`
    says why)."""

    host_ip: str
    host_ifname: str
    nodes: tuple[Node, ...]
    isolated: bool
    why_not: str = ""


def _ip(*args: str, netns: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    done = subprocess.run([*prefix, "ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def namespaces_unavailable() -> str:
    """Why nodes cannot be network namespaces here ('' when they can)."""
    if os.geteuid() != 0:
        return "not root: `ip netns add` needs CAP_SYS_ADMIN"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    return ""


@contextlib.contextmanager
def loopback(names: Sequence[str], why: str) -> Iterator[Network]:
    """Every node a process on 127.0.0.1."""
    yield Network("127.0.0.1", "lo", tuple(Node(name, "127.0.0.1") for name in names), isolated=False, why_not=why)


@contextlib.contextmanager
def namespaces(names: Sequence[str]) -> Iterator[Network]:
    """One network namespace per name, each with a veth on a fresh bridge; all removed when the context ends."""
    bridge, subnet = _new_bridge()
    made: list[str] = []
    try:
        _ip("addr", "add", f"{subnet}.1/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        nodes = []
        for i, name in enumerate(names):
            netns, ip = f"{bridge}-{name}", f"{subnet}.{10 + i}"
            _ip("netns", "add", netns)
            made.append(netns)
            _join(bridge, netns, f"{bridge}h{i}", f"{bridge}n{i}", ip)
            nodes.append(Node(name, ip, f"{bridge}n{i}", netns))
        yield Network(f"{subnet}.1", bridge, tuple(nodes), isolated=True)
    finally:
        for netns in made:  # deleting a namespace deletes its end of the veth pair, and so the pair
            with contextlib.suppress(OSError):
                _ip("netns", "delete", netns)
        with contextlib.suppress(OSError):
            _ip("link", "delete", bridge)


def _new_bridge() -> tuple[str, str]:
    """A bridge named after the first free subnet: creating the link is the atomic claim on N."""
    for n in range(1, 255):
        try:
            _ip("link", "add", f"ilbr{n}", "type", "bridge")
            return f"ilbr{n}", f"{SUBNET}.{n}"
        except OSError as exc:
            if "exists" not in str(exc):
                raise
    raise OSError(f"every bridge ilbr1..ilbr254 ({SUBNET}.N.0/24) is in use")


def _join(bridge: str, netns: str, host_end: str, node_end: str, ip: str) -> None:
    _ip("link", "add", host_end, "type", "veth", "peer", "name", node_end)
    _ip("link", "set", node_end, "netns", netns)
    _ip("link", "set", host_end, "master", bridge)
    _ip("link", "set", host_end, "up")
    _ip("addr", "add", f"{ip}/24", "dev", node_end, netns=netns)
    _ip("link", "set", node_end, "up", netns=netns)
    _ip("link", "set", "lo", "up", netns=netns)  # Ray and Dask talk to themselves over loopback too


@contextlib.contextmanager
def cluster_network(names: Sequence[str]) -> Iterator[Network]:
    """Namespaces where this machine allows them, loopback otherwise (`Network.why_not` says why).
    INTERLINGUA_TEST_NETNS=0 asks for loopback."""
    why = namespaces_unavailable()
    if os.environ.get("INTERLINGUA_TEST_NETNS") == "0":
        why = "INTERLINGUA_TEST_NETNS=0"
    with contextlib.ExitStack() as stack:
        if why:
            network = stack.enter_context(loopback(names, why))
        else:
            try:
                network = stack.enter_context(namespaces(names))
            except OSError as exc:
                network = stack.enter_context(loopback(names, f"network namespaces failed here: {exc}"))
        yield network
