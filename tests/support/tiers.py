"""The test tiers, by what a test starts, and the guard that keeps the markers true.

A test carries a marker for each costly thing it starts (setup.cfg declares them):

    beam     an Apache Beam pipeline (prepare, TestPipeline), or the prepared test dataset
    ray      a Ray instance of this process (Train, Tune, Data, Serve)
    server   a server: S3 (moto), MLflow, PostgreSQL, the HTTP endpoint
    venv     a fresh virtualenv, or a pip install into one
    cluster  the multi-node test cluster (network namespaces, Ray and Dask nodes)

The fast tier (`make test-fast`) is every test with none of them (`-m "not (beam or ray or server or venv or
cluster)"`). A test is marked by what its fixtures start (`FIXTURE_MARKERS`, applied at collection, so the shared
fixtures mark their users) and by hand for what its own body starts. The guard then holds every test to its
markers, in every tier: while a test is set up and run, each entry point below that its markers do not
allow raises `UnmarkedResource`, naming the marker to add. So the fast tier cannot drift: a test that starts Ray
without `ray` fails the whole suite, not just a fast run. (Teardowns are not guarded: they stop things.)
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

RESOURCES = ("beam", "ray", "server", "venv", "cluster")
FAST = "not (" + " or ".join(RESOURCES) + ")"

# what each shared fixture starts (its users get the marker; `item.fixturenames` holds every fixture a test
# needs, through other fixtures too)
FIXTURE_MARKERS = {
    "small_dataset": ("beam",),
    "trained_run": ("beam", "ray"),
    "_moto": ("server",),
    "local_ray": ("ray", "server"),
    "s3_bucket": ("server",),
    "s3_server": ("server",),
    "s3_env": ("server",),
    "tracking_server": ("server", "cluster"),
    "cluster_network": ("cluster",),
    "cluster_ray": ("cluster", "ray"),
    "tracked_ray": ("cluster", "ray"),
    "cluster_dask": ("cluster",),
    "serve_venv": ("venv",),
    "two_node_cluster": ("cluster", "ray"),
}

# The product's commands that start a tiered resource when run in a child process (the marker it needs; `a|b`:
# either). Its other commands, and `--help`, start none.
PRODUCT_CLI = ("interlingua", "orchestration.cli")
WORK_COMMANDS = {
    "prepare": "beam",
    "run": "beam",
    "train": "ray",
    "evaluate": "ray",
    "tune": "ray",
    "embed": "ray",
    "mine": "ray",
    "search": "ray",
    "serve": "server",
}
# Programs that are servers or cluster nodes, by the words of their command line.
SERVERS = {"moto_server": "server", "postgres": "server", "initdb": "server", "uvicorn": "server", "gunicorn": "server"}
CLUSTER = {"ray start", "dask scheduler", "dask worker", "ip netns", "unshare"}


class UnmarkedResource(RuntimeError):
    """A test started a resource its markers do not declare."""


def _refuse(marker: str, what: str):
    raise UnmarkedResource(
        f"this test starts {what} but is not marked `{marker}`: add @pytest.mark.{marker} "
        f"(or use a shared fixture that carries it; tests/support/tiers.py) so that the fast tier leaves it out"
    )


def _child_needs(args: Sequence[str]) -> tuple[str, str] | None:
    """(marker, what) for a child process that starts a tiered resource, else None."""
    words = [os.path.basename(str(a)) for a in args]
    line = " ".join(words)
    for word, marker in SERVERS.items():
        if word in words:
            return marker, f"a {word} server"
    if "mlflow" in words and "server" in words:
        return "server", "an MLflow server"
    for phrase in CLUSTER:
        if phrase in line:
            return "cluster", f"`{phrase}`"
    if "venv" in words or "virtualenv" in words or ("pip" in words and "install" in words):
        return "venv", "a virtualenv or a pip install"
    if _this_environment(args) and any(word in words for word in PRODUCT_CLI) and not {"-h", "--help"} & set(words):
        command = next((w for w in words if w in WORK_COMMANDS), None)
        if command is not None:
            return WORK_COMMANDS[command], f"`interlingua {command}` in a child process"
    return None


def _this_environment(args: Sequence[str]) -> bool:
    """Whether the child runs this environment's Python or scripts (where the product has Beam and Ray; in
    another virtualenv the install tests check what is missing there)."""
    program = Path(args[0]) if args else None
    return program is not None and (program == Path(sys.executable) or program.parent == Path(sys.executable).parent)


# The markers of the test being set up or run, innermost last (a test that runs pytest in itself nests one);
# empty: no test phase, nothing refused. The entry points are wrapped once, for the whole process, and each
# wrapper asks this: a test that monkeypatches one of them saves and puts back the wrapper, never a guard of
# another test's.
_ACTIVE: list[set[str]] = []
_INSTALLED: list[bool] = []


def _allowed(marker: str) -> bool:
    return not _ACTIVE or bool(_ACTIVE[-1] & set(marker.split("|")))


def _install() -> None:
    """Wrap every tiered entry point, once per process."""
    if _INSTALLED:
        return
    _INSTALLED.append(True)
    import apache_beam.pipeline
    import ray
    import ray._private.worker as ray_worker

    real_ray_init = ray_worker.init

    def checked_ray_init(*args, **kwargs):
        if not _allowed("ray"):
            _refuse("ray", "a Ray instance (ray.init)")
        return real_ray_init(*args, **kwargs)

    ray.init = ray_worker.init = checked_ray_init
    real_run = apache_beam.pipeline.Pipeline.run

    def checked_run(self, *args, **kwargs):
        if not _allowed("beam"):
            _refuse("beam", "an Apache Beam pipeline")
        return real_run(self, *args, **kwargs)

    apache_beam.pipeline.Pipeline.run = checked_run
    real_listen = socket.socket.listen

    def checked_listen(self, *args):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _allowed("server"):
            _refuse("server", "a server in this process (a socket that listens)")
        return real_listen(self, *args)

    socket.socket.listen = checked_listen
    real_popen = subprocess.Popen.__init__

    def checked_popen(self, args, *rest, **kwargs):
        if _ACTIVE:
            argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
            if len(argv) == 1 and isinstance(argv[0], str) and kwargs.get("shell"):
                argv = argv[0].split()
            need = _child_needs([str(a) for a in argv])
            if need is not None and not _allowed(need[0]):
                _refuse(need[0].replace("|", "` or `"), need[1])
        return real_popen(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = checked_popen


@contextlib.contextmanager
def guarded(markers: set[str]) -> Iterator[None]:
    """Refuse, for the duration, every tiered entry point that `markers` do not allow."""
    _install()
    _ACTIVE.append(set(markers))
    try:
        yield
    finally:
        _ACTIVE.pop()


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture in item.fixturenames:
            for marker in FIXTURE_MARKERS.get(fixture, ()):
                item.add_marker(marker)
        # with pytest-xdist (`--dist loadgroup`): the test cluster's tests share its one start, the fresh-venv
        # tests the one wheelhouse, and the tests of the shared trained model (`trained_run`) its one
        # training (about 30 CPU-seconds), each on one worker
        for group in ("cluster", "venv"):
            if item.get_closest_marker(group) is not None:
                item.add_marker(pytest.mark.xdist_group(group))
                break
        else:
            if "trained_run" in item.fixturenames:
                item.add_marker(pytest.mark.xdist_group("trained"))


def _markers(item) -> set[str]:
    markers = {m.name for m in item.iter_markers()} & set(RESOURCES)
    if "cluster" in markers:  # the cluster's tests start its servers and join its Ray
        markers |= {"server", "ray"}
    return markers


# Setup and call only: a teardown stops things (and may end a wider fixture that another test started).
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    with guarded(_markers(item)):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    with guarded(_markers(item)):
        yield
