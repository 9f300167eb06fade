"""Ray as the search executor: searches as Ray tasks give what the in-process search gives, from
arrays in the object store or from embeddings on disk that each task reads itself, or that the driver's disk
shipped through the object store; the checks of what every node must reach; a command's own Ray instance
listening on the loopback address alone."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest

from evaluation.search import search
from evaluation.xsim import LocalExecutor, pair_metrics, search_pairs
from orchestration.adapters.cluster import RayExecutor
from tests.support.embeddings import aligned, store_of
from tests.support.procs import PACKAGE_ROOT


def test_ray_sharded_search_equals_single_process(local_ray):
    rng = np.random.default_rng(0)
    base = rng.normal(size=(120, 16)).astype(np.float32)
    emb = {"en": base, "fr": base + rng.normal(scale=1.0, size=base.shape).astype(np.float32)}
    for metric in ("cosine", "l2"):
        local = search_pairs(emb, metric=metric, shards=1, k=5, executor=LocalExecutor())
        on_ray = search_pairs(emb, metric=metric, shards=7, k=5, executor=RayExecutor())
        for pair in local:
            np.testing.assert_array_equal(on_ray[pair].ids, local[pair].ids)
            np.testing.assert_array_equal(on_ray[pair].better, local[pair].better)
        np.testing.assert_array_equal(local[("fr", "en")].ids, search(emb["fr"], emb["en"], 5, metric)[1])


def test_ray_tasks_read_stored_embeddings_a_few_in_flight(local_ray, tmp_path):
    arrays = aligned(n=90)
    texts = {lang: [f"{lang} {i % 30}" for i in range(90)] for lang in arrays}
    store = store_of(tmp_path, arrays, texts, cuts=[0, 40, 41, 90])
    local = search_pairs(arrays, k=5)
    executor = RayExecutor(max_in_flight=3)  # 6 pairs x 3 query blocks x 4 shards = 72 tasks, 3 at a time
    on_ray = search_pairs(store, shards=4, k=5, query_block=32, executor=executor, results_dir=tmp_path / "r")
    for pair in local:
        np.testing.assert_array_equal(on_ray[pair].ids[0:90], local[pair].ids)
        np.testing.assert_array_equal(on_ray[pair].better[0:90], local[pair].better)
    assert pair_metrics(on_ray, store.hashes(), metric="cosine", margin_k=4) == pair_metrics(
        local, texts, metric="cosine", margin_k=4
    )


@pytest.mark.parametrize("uri", ["sqlite:////srv/mlflow.db", "/srv/mlruns", "file:///srv/mlruns"])
def test_a_tracking_file_or_a_local_folder_is_refused_on_a_cluster_of_several_hosts(monkeypatch, uri):
    import ray

    from orchestration.adapters.cluster import check_every_node_reaches
    from orchestration.config import ConfigError

    hosts = [
        {"NodeManagerAddress": ip, "Alive": alive}
        for ip, alive in [("10.0.0.1", True), ("10.0.0.1", True), ("10.0.0.9", False)]
    ]
    monkeypatch.setattr(ray, "nodes", lambda: hosts)
    check_every_node_reaches(uri, run_dir="/srv/run")  # one host (the dead node aside): its files are everyone's
    hosts.append({"NodeManagerAddress": "10.0.0.2", "Alive": True})
    with pytest.raises(ConfigError, match=r"tracking.uri: .* spans 2 hosts \(10.0.0.1, 10.0.0.2\).*MLflow server"):
        check_every_node_reaches(uri)
    with pytest.raises(ConfigError, match=r"run_dir: /srv/run is a path on this host.*s3://BUCKET.*file:///PATH"):
        check_every_node_reaches("http://10.0.0.1:5000", dataset_dir="s3://b/data", run_dir="/srv/run")
    # a server, a bucket and a filesystem every host mounts: every host reaches them
    check_every_node_reaches("http://10.0.0.1:5000", dataset_dir="s3://b/data", run_dir="file:///nfs/run")


@pytest.mark.ray
def test_shipped_embeddings_are_read_from_the_object_store_not_the_drivers_disk(tmp_path, local_ray, monkeypatch):
    """A search task on another host cannot read the driver's disk: on a cluster of several nodes `shipped` puts
    a local store's blocks into Ray's object store, and its rows (any range, across blocks) come from there with
    the folder gone; a store at a URI is left as it is (every node reads the store), and so is any store on a
    cluster of one node (every task runs here)."""
    import shutil

    import ray

    from evaluation.store import StoredEmbeddings
    from evaluation.xsim import search_pairs
    from orchestration.adapters.cluster import RayExecutor, shipped
    from tests.support.embeddings import aligned, store_of

    arrays = aligned(n=50)
    store = store_of(tmp_path, arrays, {lang: [f"{lang}{i}" for i in range(50)] for lang in arrays}, [0, 7, 30, 50])
    here = search_pairs(store, shards=2, k=3)
    assert shipped(store) is store  # the test's Ray has one node
    nodes = ray.nodes()
    monkeypatch.setattr(ray, "nodes", lambda: [*nodes, {"NodeManagerAddress": "10.0.0.2", "Alive": True}])
    moved = shipped(store)
    shutil.rmtree(store.folder)
    for lang in arrays:
        np.testing.assert_array_equal(moved.rows(lang, 5, 33), arrays[lang][5:33])
    there = search_pairs(moved, shards=2, k=3, executor=RayExecutor(), query_block=16)
    for pair, result in here.items():
        np.testing.assert_array_equal(there[pair].ids, result.ids)
    at_a_uri = StoredEmbeddings("s3://bucket/emb", ["en"], 16, "float32", (0, 1), ("part-00000",))
    assert shipped(at_a_uri) is at_a_uri


@pytest.mark.ray
def test_a_local_ray_that_a_command_starts_listens_on_the_loopback_address_only(monkeypatch):
    """The GCS, the raylet, the object manager, the agents, the dashboard (asked for: `runtime.ray_dashboard`)
    and a worker of a command's own Ray instance bind no address another host could reach. The command owns
    that instance (`owns_ray`: its training leaves out the placement group cleaner); another that joins it
    does not."""
    import psutil
    import ray

    from orchestration.adapters.cluster import ensure_ray, owns_ray
    from tests.support.fixtures import reset_ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    reset_ray()  # the run's shared instance, if this process holds it: the next test that asks starts it again
    ensure_ray(None, dashboard=True)  # stopped after the test (tests/support/fixtures.py, _environment_restored)
    assert ray.get(ray.remote(lambda: 1).remote()) == 1  # a worker is up, with its own server
    assert owns_ray()
    assert _dashboard_url().startswith("127.0.0.1:")
    tree = {os.getpid()} | {p.pid for p in psutil.Process().children(recursive=True)}  # the driver too
    bound = [
        (c.pid, c.laddr)
        for c in psutil.net_connections(kind="inet")
        if c.pid in tree and c.laddr and (c.status == psutil.CONN_LISTEN or not c.raddr)
    ]
    names = {psutil.Process(pid).name() for pid, _ in bound}
    assert {"gcs_server", "raylet"} <= names, names
    assert all(address.ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1") for _, address in bound), bound
    # another command joins it at its address (`runtime.ray_address=127.0.0.1:PORT`), as a driver on loopback
    address = ray.get_runtime_context().gcs_address
    assert address.startswith("127.0.0.1:")
    join = subprocess.run(
        [
            sys.executable,
            "-c",
            "import ray; from orchestration.adapters.cluster import ensure_ray, owns_ray; "
            f"ensure_ray({address!r}); print(ray.get(ray.remote(lambda: 2).remote()), owns_ray())",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=PACKAGE_ROOT,
    )
    assert join.stdout.strip() == "2 False", join.stderr[-3000:]


def _dashboard_url() -> str:
    import ray

    return ray._private.worker.global_worker.node.address_info["webui_url"] or ""


class _DiesOnce:
    """A map function whose first call on each block fails as a task does whose node died under it (a file
    marks that it did)."""

    def __init__(self, marks: str) -> None:
        self.marks = marks

    def __call__(self, batch):
        from pathlib import Path

        mark = Path(self.marks) / f"{int(batch['id'][0])}"
        if not mark.exists():
            mark.touch()
            raise RuntimeError("ray.exceptions.ActorDiedError: The actor died because its node has died.")
        return batch


@pytest.mark.parametrize("under_data_job", [True, False])
def test_a_ray_data_task_that_a_dead_node_failed_runs_again_and_any_other_error_fails(
    local_ray, tmp_path, under_data_job
):
    import ray.data

    from orchestration.adapters.cluster import data_job

    def run():
        dataset = ray.data.range(4, override_num_blocks=2)
        return sorted(r["id"] for r in dataset.map_batches(_DiesOnce(str(tmp_path))).iter_rows())

    if under_data_job:
        with data_job():
            assert run() == [0, 1, 2, 3]
        assert ray.data.DataContext.get_current().max_map_retries == 0  # put back after the job
    else:
        with pytest.raises(Exception, match="ActorDiedError"):
            run()
    with data_job():  # another error is not retried: the first failure fails the job
        with pytest.raises(Exception, match="ZeroDivisionError"):
            ray.data.range(2).map(lambda row: {"x": 1 / 0}).materialize()


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def ray_data_lines():
    """What Ray Data's handlers would print of its `Dataset`'s lines (a handler on the module's own logger: Ray
    Data replaces the handlers of its `ray.data` logger when it sets up its logging, which does not propagate)."""
    handler = _Records()
    logger = logging.getLogger("ray.data.dataset")
    logger.addHandler(handler)
    yield handler.messages
    logger.removeHandler(handler)


@pytest.mark.parametrize("own", [True, False])
def test_ray_datas_no_free_cpu_warning_is_dropped_on_an_instance_of_our_own_only(monkeypatch, ray_data_lines, own):
    from orchestration.adapters import cluster

    monkeypatch.setattr(cluster, "owns_ray", lambda: own)
    monkeypatch.setattr(logging.getLogger("ray.data.dataset"), "filters", [])
    cluster.quiet_own_busy_cpus()
    cluster.quiet_own_busy_cpus()  # once
    assert len(logging.getLogger("ray.data.dataset").filters) == 1
    warning = f"{cluster.BUSY_CPUS}. The Dataset job will hang unless more CPUs are freed up."
    logging.getLogger("ray.data.dataset").warning(warning)
    logging.getLogger("ray.data.dataset").warning("another warning")
    assert ray_data_lines == ([] if own else [warning]) + ["another warning"]


@pytest.mark.ray
def test_a_job_started_while_our_own_work_holds_every_cpu_prints_no_hang_warning(
    local_ray, monkeypatch, ray_data_lines
):
    """As `run`'s evaluation: the job starts while work of this command holds both CPUs, which come back a moment
    later. The job finishes, and Ray Data's "will hang" line is not printed."""
    import threading

    import ray
    import ray.data
    import ray.util.debug

    from orchestration.adapters import cluster

    monkeypatch.setattr(logging.getLogger("ray.data.dataset"), "filters", [])
    monkeypatch.setattr(ray.util.debug, "_logged", set())  # Ray Data warns once per process: as if for the first time
    cluster.quiet_own_busy_cpus()

    @ray.remote(num_cpus=2)
    class Holder:
        def ready(self) -> bool:
            return True

    holder = Holder.remote()
    ray.get(holder.ready.remote())
    assert ray.available_resources().get("CPU", 0.0) == 0
    release = threading.Timer(1.0, ray.kill, args=(holder,))
    release.start()
    try:
        with cluster.data_job():
            assert ray.data.range(4).materialize().count() == 4  # an execution: Ray Data checks for a free CPU
    finally:
        release.join()
    assert not [line for line in ray_data_lines if cluster.BUSY_CPUS in line]
    assert "cpu_warning" in ray.util.debug._logged  # Ray Data did try to warn: the filter is what held it back
