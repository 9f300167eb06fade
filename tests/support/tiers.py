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
from pathlib import Path
from typing import Iterator, Sequence

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
    "cluster_dask": ("cluster",),
    "serve_venv": ("venv",),
    "two_node_cluster": ("cluster",),
}

# The product's commands that start a tiered resource when run in a child process (the marker it needs; `a|b`:
# either). Its other commands, and `--help`, start none.
PRODUCT_CLI = ("interlingua", "orchestration.cli")
WORK_COMMANDS = {"prepare": "beam", "run": "beam", "train": "ray", "evaluate": "ray", "tune": "ray",
                 "embed": "ray", "mine": "ray", "search": "ray", "serve": "server"}
# Programs that are servers or cluster nodes, by the words of their command line.
SERVERS = {"moto_server": "server", "postgres": "server", "initdb": "server", "uvicorn": "server",
           "gunicorn": "server"}
CLUSTER = {"ray start", "dask scheduler", "dask worker", "ip netns", "unshare"}


class UnmarkedResource(RuntimeError):
    """A test started a resource its markers do not declare."""


def _refuse(marker: str, what: str):
    raise UnmarkedResource(
        f"this test starts {what} but is not marked `{marker}`: add @pytest.mark.{marker} "
        f"(or use a shared fixture that carries it; tests/support/tiers.py) so that the fast tier leaves it out")


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
    return program is not None and (program == Path(sys.executable)
                                    or program.parent == Path(sys.executable).parent)


@contextlib.contextmanager
def guarded(markers: set[str]) -> Iterator[None]:
    """Refuse, for the duration, every tiered entry point that `markers` do not allow."""
    patches: list[tuple[object, str, object]] = []

    def patch(owner, name, replacement):
        patches.append((owner, name, getattr(owner, name)))
        setattr(owner, name, replacement)

    if "ray" not in markers:
        import ray
        import ray._private.worker as ray_worker

        def no_ray(*args, **kwargs):
            _refuse("ray", "a Ray instance (ray.init)")

        patch(ray, "init", no_ray)
        patch(ray_worker, "init", no_ray)
    if "beam" not in markers:
        import apache_beam.pipeline

        def no_beam(self, *args, **kwargs):
            _refuse("beam", "an Apache Beam pipeline")

        patch(apache_beam.pipeline.Pipeline, "run", no_beam)
    if "server" not in markers:
        real_listen = socket.socket.listen

        def no_listen(self, *args):
            if self.family in (socket.AF_INET, socket.AF_INET6):
                _refuse("server", "a server in this process (a socket that listens)")
            return real_listen(self, *args)

        patch(socket.socket, "listen", no_listen)
    real_init = subprocess.Popen.__init__

    def checked_popen(self, args, *rest, **kwargs):
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
        if len(argv) == 1 and isinstance(argv[0], str) and kwargs.get("shell"):
            argv = argv[0].split()
        need = _child_needs([str(a) for a in argv])
        if need is not None:
            marker, what = need
            if not markers & set(marker.split("|")):
                _refuse(marker.replace("|", "` or `"), what)
        return real_init(self, args, *rest, **kwargs)

    patch(subprocess.Popen, "__init__", checked_popen)
    try:
        yield
    finally:
        for owner, name, original in reversed(patches):
            setattr(owner, name, original)


def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture in item.fixturenames:
            for marker in FIXTURE_MARKERS.get(fixture, ()):
                item.add_marker(marker)


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


