"""Server processes of the test cluster: started in their own session with their own scratch folders,
waited on with a deadline, stopped as a group, and named with their log's tail when they fail."""

from __future__ import annotations

import contextlib
import os
import random
import re
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # where `import orchestration` works from
TAIL_LINES = 30


class ClusterStartError(RuntimeError):
    """A server of the test cluster did not come up: the message names it and ends with its log's tail."""


def log_tail(log: Path, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of a log, or a note that there is none."""
    try:
        text = log.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return f"(no log at {log})"
    return f"--- last {len(text)} lines of {log} ---\n" + "\n".join(text)


@dataclass
class Server:
    """One process (and whatever it forks: it leads its own process group) with its log."""

    name: str
    process: subprocess.Popen
    log: Path

    def failed(self, why: str) -> ClusterStartError:
        return ClusterStartError(f"{self.name} did not start: {why}\n{log_tail(self.log)}")

    def stop(self, timeout_s: float = 10) -> None:
        """SIGTERM to its process group and its descendants (Ray's workers make groups of their own),
        SIGKILL to whatever is left after `timeout_s`; returns once they are gone."""
        stop_processes(family(self.process.pid), timeout_s)
        if self.process.poll() is None:
            self.process.wait(timeout=timeout_s)


def family(pid: int) -> list:
    """The process `pid`, its descendants and the rest of its process group, as psutil.Process objects."""
    import psutil

    try:
        root = psutil.Process(pid)
        family = {root, *root.children(recursive=True)}
    except psutil.NoSuchProcess:
        family = set()
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(process.pid) == pid:
                family.add(process)
    return list(family)


def processes_under(folder: Path) -> list:
    """Processes whose TMPDIR lies in `folder`: every process a test node started, even one that left its
    parent's group and was re-parented (the node's scratch folder is its fingerprint)."""
    import psutil

    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            tmpdir = process.environ().get("TMPDIR", "")
            if tmpdir and Path(tmpdir).is_relative_to(folder):
                found.append(process)
    return found


def stop_processes(processes: list, timeout_s: float = 10) -> None:
    """SIGTERM, then SIGKILL after `timeout_s` to those still running; waits until they are gone."""
    import psutil

    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(processes, timeout=timeout_s)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    _, alive = psutil.wait_procs(alive, timeout=timeout_s)
    if alive:
        raise RuntimeError(f"processes {[p.pid for p in alive]} outlived SIGKILL")


def spawn(
    name: str,
    args: Sequence[str],
    log: Path,
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    prefix: Sequence[str] = (),
) -> Server:
    """Start `prefix + args` in a new session (so that stopping it reaches everything it forks), writing
    stdout and stderr to `log`. `env` is added to this process's environment with this checkout first on
    PYTHONPATH, so that children import the code under test."""
    path = os.environ.get("PYTHONPATH", "")
    full_env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(p for p in (str(PACKAGE_ROOT), path) if p)}
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [*prefix, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env=full_env,
            start_new_session=True,
        )
    return Server(name, process, log)


def wait_until(
    check: Callable[[], T | None], *, timeout_s: float, server: Server, what: str, every_s: float = 0.2
) -> T:
    """Poll `check` until it returns something truthy; ClusterStartError (with `server`'s log) when the
    server exits first or `timeout_s` passes. Exceptions from `check` count as "not yet"."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - a server coming up refuses, resets, answers 503...
            last = exc
        if server.process.poll() is not None:
            raise server.failed(f"it exited with {server.process.returncode} before {what}")
        if time.monotonic() > deadline:
            raise server.failed(f"no {what} within {timeout_s:.0f}s" + (f" (last error: {last})" if last else ""))
        time.sleep(every_s)


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free on `host` now (the server binds it a moment later)."""
    return free_ports(1, host)[0]


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """`n` distinct ports free on `host` now (held together while they are chosen, so none repeats)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_for(
    predicate: Callable[[], T | None],
    timeout: float,
    what: str,
    proc: subprocess.Popen | None = None,
    every_s: float = 0.2,
    log: Path | None = None,
) -> T:
    """Poll `predicate` until it returns something truthy (returned). AssertionError naming `what` when
    `timeout` passes or when `proc` (a command the test waits on) exits first, with its stderr's tail when
    it was piped, or `log`'s tail (where the command writes its output)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            err = proc.stderr.read()[-3000:] if proc.stderr is not None else ""
            raise AssertionError(
                f"the command exited ({proc.returncode}) before {what}"
                + (f": {err}" if err else "")
                + (f"\n{log_tail(log)}" if log else "")
            )
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f}s waiting for {what}" + (f"\n{log_tail(log)}" if log else "")
            )
        time.sleep(every_s)


def run_to_end(command: Sequence[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """`subprocess.run` of a command with its output captured as text. Past `timeout`, an AssertionError that
    ends with the command's last stderr lines (where a slow or stuck command was), not a bare TimeoutExpired."""
    try:
        return subprocess.run(list(command), capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        lines = err.splitlines()[-TAIL_LINES:]
        raise AssertionError(
            f"{' '.join(command[:4])} ... ran past {timeout:.0f}s; the last {len(lines)} lines "
            "of its stderr:\n" + "\n".join(lines)
        ) from None


def kill_and_tail(proc: subprocess.Popen, chars: int = 3000) -> str:
    """Kill a command whose stderr is piped and return that stderr's last `chars` characters (what it had
    written, also when a child of it keeps the pipe open)."""
    proc.kill()
    try:
        err = proc.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr or ""
    return (err.decode("utf-8", "replace") if isinstance(err, bytes) else err)[-chars:]


def stop(proc: subprocess.Popen, timeout: float = 120) -> None:
    """Stop a command the way an operator does (SIGTERM), killing it only if it has not ended in `timeout`."""
    import signal

    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def free_port_range(host: str, size: int, low: int = 20000, high: int = 29000, tries: int = 50) -> int:
    """The first of `size` consecutive ports all free on `host` now (for Ray's worker port range)."""
    for _ in range(tries):
        first = random.randrange(low, high - size)
        if all(_bindable(host, port) for port in range(first, first + size)):
            return first
    raise ClusterStartError(f"no {size} consecutive free ports on {host} between {low} and {high}")


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def port_open(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on host:port."""
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, port)) == 0


# Tracebacks that Ray Train's own actors log, which no code of the command runs in:
# - its placement-group cleaner (a detached actor of every training) finds its cluster by looking for GCS
#   processes on the machine; beside a second Ray instance (another test process's) its monitor thread dies
#   ("Found multiple active Ray instances");
# - its controller logs a failed resource request with its traceback when the CPU is overloaded, "safe to
#   ignore" by its own message (train/v2/.../autoscaling_coordinator_client.py).
_RAY_TRAIN_ACTOR_LINE = re.compile(r"^\((PlacementGroupCleaner|TrainController) pid=\d+\)")


def own_output(text: str) -> str:
    """A command's output without the lines of Ray Train's own actors (the command's workers' lines stay)."""
    return "\n".join(line for line in text.splitlines() if not _RAY_TRAIN_ACTOR_LINE.match(line))
