"""Who holds a run dir's lock (`orchestration.adapters.lock`): the holder's name, written into a local lock file
or a lease object (`HOLDER`, `holder_name`), and the identity of its process (`process_of`: boot id, pid
namespace, pid, start time), by which a lease of a process of this host that has exited is told apart
(`is_gone`).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TypedDict

from core.ownership import HOLDER

__all__ = ["HOLDER", "holder_name", "is_gone", "process_of"]


class ProcessIdentity(TypedDict):
    """A process, told apart from every other on any host, ever (`process_of`)."""

    boot: str  # the kernel's boot id
    pidns: str  # its pid namespace
    pid: int
    start: int  # clock ticks since boot


# what `holder_name` writes, in a lease or a local lock file: anything else is a user's (`core.ownership.HOLDER`)


def holder_name() -> str:
    return f"pid {os.getpid()} on {socket.gethostname()}"


def process_of(pid: int) -> ProcessIdentity | None:
    """What tells this process apart from every other on any host, ever: the kernel's boot id, its pid
    namespace, its pid and its start time (clock ticks since boot). None where /proc does not say (not Linux)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the fields after the command name (in parentheses, which may hold anything): state is field 3,
    # the start time field 22
    return {"boot": boot, "pidns": namespace, "pid": pid, "start": int(stat.rsplit(")", 1)[1].split()[19])}


def is_gone(holder: object) -> bool:
    """True only when `holder` (a lease's `process`) is certainly dead: a process of this kernel's boot and
    this pid namespace whose pid is free or belongs to a later process. A holder on another host or in
    another container, or a lease that does not say, is alive as far as this process can tell."""
    me = process_of(os.getpid())
    if me is None or not isinstance(holder, dict) or not isinstance(holder.get("pid"), int):
        return False
    if (holder.get("boot"), holder.get("pidns")) != (me["boot"], me["pidns"]):
        return False
    now = process_of(holder["pid"])
    return now is None or now["start"] != holder.get("start")
