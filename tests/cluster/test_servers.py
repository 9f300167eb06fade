"""The test cluster's own checks: each server is real, reachable from the nodes, and fails loudly."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.support import tracking_server as tracking
from tests.support.procs import ClusterStartError, spawn, wait_until

pytestmark = pytest.mark.cluster
TEXT = "Au commencement, Dieu créa les cieux et la terre.\n"


def test_a_server_that_exits_is_named_with_its_log(tmp_path):
    server = spawn(
        "the broken server",
        [sys.executable, "-c", "import sys; print('port already in use'); sys.exit(3)"],
        tmp_path / "broken.log",
    )
    with pytest.raises(
        ClusterStartError, match="(?s)the broken server did not start: it exited with 3.*port already in use"
    ):
        wait_until(lambda: False, timeout_s=60, server=server, what="an answer")


def test_missing_postgres_binaries_fail_naming_the_package(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERLINGUA_PG_BIN", str(tmp_path))
    with pytest.raises(ClusterStartError, match=r"PostgreSQL did not start: no initdb.*apt-get install -y postgresql"):
        tracking.postgres_bin()


def test_an_object_written_through_pyarrow_is_read_back_on_a_worker_node(s3_server, cluster_dask):
    from distributed import Client

    s3 = s3_server.filesystem()
    with s3.open_output_stream(f"{s3_server.bucket}/smoke/genesis.txt") as out:
        out.write(TEXT.encode())
    assert s3.open_input_stream(f"{s3_server.bucket}/smoke/genesis.txt").read().decode() == TEXT

    def read_there(path: str) -> tuple[str, str]:
        import os

        from pyarrow import fs

        # the node has the standard variables only; pyarrow needs the endpoint handed to it
        endpoint = os.environ["AWS_ENDPOINT_URL"]
        remote = fs.S3FileSystem(endpoint_override=endpoint.split("://")[1], scheme="http")
        return os.environ["TMPDIR"], remote.open_input_stream(path).read().decode()

    with Client(cluster_dask.address, timeout=60) as client:
        tmpdir, text = client.submit(
            read_there, f"{s3_server.bucket}/smoke/genesis.txt", resources={"node_b": 1}
        ).result(timeout=60)
    assert text == TEXT and tmpdir == str(cluster_dask.workers[1].scratch / "tmp")


def test_a_dask_computation_runs_on_both_workers(cluster_dask):
    from distributed import Client

    def where(line: str) -> tuple[int, str, str]:
        import os

        from distributed import get_worker

        return len(line.split()), get_worker().name, os.getcwd()

    lines = TEXT.split(",") * 2
    with Client(cluster_dask.address, timeout=60) as client:
        futures = [
            client.submit(where, line, resources={f"node_{name}": 1}, pure=False)
            for line in lines
            for name in ("a", "b")
        ]
        results = client.gather(futures)
    assert {name for _, name, _ in results} == {"a", "b"}
    assert sum(words for words, _, _ in results) == 2 * 2 * len(TEXT.split())
    assert {cwd for _, _, cwd in results} == {str(w.scratch / "work") for w in cluster_dask.workers}
    if cluster_dask.network.isolated:  # each worker on an address of its own
        assert {w.ip for w in cluster_dask.workers} == {n.ip for n in cluster_dask.network.nodes}


def test_the_tracking_server_keeps_runs_in_postgres_and_artifacts_in_the_bucket_and_refuses_strangers(
    tracking_server, s3_server, tmp_path, monkeypatch, capsys
):
    import contextlib

    import psycopg2
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from orchestration.adapters import tracking as client
    from orchestration.cli import main

    with monkeypatch.context() as stranger:  # no credentials, then a wrong password
        for key in tracking_server.env:
            stranger.delenv(key)
        with pytest.raises(MlflowException, match="401"):
            MlflowClient(tracking_server.uri).create_experiment("anyone")
        assert main(["compare", f"tracking.uri={tracking_server.uri}"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "UNAUTHENTICATED" in err and "MLFLOW_TRACKING_PASSWORD" in err, err
        stranger.setenv(tracking.USERNAME_ENV, tracking_server.env[tracking.USERNAME_ENV])
        stranger.setenv(tracking.PASSWORD_ENV, "not-the-password")
        with pytest.raises(MlflowException, match="401"):
            MlflowClient(tracking_server.uri).create_experiment("anyone")
    assert not [e for e in MlflowClient(tracking_server.uri).search_experiments() if e.name == "anyone"]

    run = client.start_run(tracking_server.uri, "smoke", "genesis", {"book": "Genesis"})
    (tmp_path / "genesis.txt").write_text(TEXT)
    client.log_artifact(tracking_server.uri, run, tmp_path / "genesis.txt")
    dsn = tracking_server.database.replace("postgresql+psycopg2://", "postgresql://")
    with contextlib.closing(psycopg2.connect(dsn)) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT name FROM runs WHERE run_uuid = %s", (run,))
        assert cursor.fetchone() == ("genesis",)
    keys = [
        o["Key"]
        for o in s3_server.client().list_objects_v2(Bucket=s3_server.bucket, Prefix="mlflow/").get("Contents", [])
    ]
    assert any(key.endswith(f"/{run}/artifacts/genesis.txt") for key in keys), keys


def test_the_ray_cluster_has_three_nodes_and_places_work_by_resource(cluster_ray, tmp_path):
    """...and each worker host has a disk of its own: a file of the driver's /tmp is not there."""
    import ray

    probe = tmp_path / "the-drivers-file.txt"
    probe.write_text(TEXT)

    nodes = cluster_ray.alive_nodes()
    assert len(nodes) == 3
    by_resource = {r: n["ip"] for n in nodes for r in n["resources"] if r.startswith("node_")}
    assert set(by_resource) == {"node_a", "node_b"}
    if cluster_ray.network.isolated:
        assert len({n["ip"] for n in nodes}) == 3
    ray.init(address=cluster_ray.address)
    try:

        @ray.remote(num_cpus=0)
        def where(path: str) -> tuple[str, str, bool]:
            import os

            return ray.util.get_node_ip_address(), os.environ["TMPDIR"], os.path.exists(path)

        placed = ray.get(
            [where.options(resources={r: 1}).remote(str(probe)) for r in ("node_a", "node_b")], timeout=120
        )
    finally:
        ray.shutdown()
    assert [ip for ip, _, _ in placed] == [by_resource["node_a"], by_resource["node_b"]]
    assert [tmp for _, tmp, _ in placed] == [str(cluster_ray.node(n).scratch / "tmp") for n in ("a", "b")]
    if cluster_ray.network.isolated:
        assert [seen for _, _, seen in placed] == [False, False]  # the driver's disk is not theirs


def _node_ip(_: int) -> str:
    import ray

    return ray.util.get_node_ip_address()


def test_a_search_of_the_drivers_embeddings_runs_on_the_worker_nodes_of_a_head_without_cpus(cluster_ray, tmp_path):
    """Evaluate's search tasks on a cluster whose head has no CPUs (as a KubeRay head) and whose hosts share no
    disk: the embeddings stored on the driver's disk reach the tasks through Ray's object store
    (`cluster.shipped`), every task runs on a worker node, and the results are those of a search here."""
    import ray

    from evaluation.xsim import search_pairs
    from orchestration.adapters.cluster import RayExecutor, shipped
    from tests.support.embeddings import aligned, store_of

    arrays = aligned(n=90)
    store = store_of(tmp_path, arrays, {lang: [f"{lang}{i}" for i in range(90)] for lang in arrays}, [0, 40, 90])
    here = search_pairs(store, shards=3, k=4)
    ray.init(address=cluster_ray.address)
    try:
        placed = set(RayExecutor(max_in_flight=12).map(_node_ip, [(i,) for i in range(24)]))
        there = search_pairs(shipped(store), shards=3, k=4, executor=RayExecutor(), query_block=32)
    finally:
        ray.shutdown()
    assert placed <= {n.ip for n in cluster_ray.workers} and cluster_ray.head.ip not in placed
    assert set(there) == set(here)
    for pair, result in here.items():
        np.testing.assert_array_equal(there[pair].ids, result.ids)
        np.testing.assert_array_equal(there[pair].better, result.better)


def test_a_killed_raylet_takes_its_node_out_of_the_cluster_until_it_restarts(cluster_ray):
    """Last in this module (pytest runs them in order): it kills a node of the module's cluster."""
    pid = cluster_ray.node("b").kill_raylet()
    wait_until(
        lambda: {r for n in cluster_ray.alive_nodes() for r in n["resources"]}.isdisjoint({"node_b"}),
        timeout_s=120,
        server=cluster_ray.head.server,
        what="node b marked dead",
    )
    assert cluster_ray.node("b").raylet_pid() != pid
    assert len(cluster_ray.alive_nodes()) == 2
    cluster_ray.restart("b")  # the host comes back
    assert sorted(r for n in cluster_ray.alive_nodes() for r in n["resources"] if r.startswith("node_")) == [
        "node_a",
        "node_b",
    ]
