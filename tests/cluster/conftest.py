"""The test cluster's fixtures, for the tests of this folder: each starts once (package scope) and stops after
the folder's last test, so none of its processes runs beside the rest of the suite.

    cluster_network   Network: host_ip, nodes a and b, isolated (namespaces) or why_not
    s3_server         S3Server of the test cluster: endpoint, bucket, env, filesystem(), client()
    s3_env            (per test) the cluster S3 server's variables set in os.environ for the test
    tracking_server   (per test) TrackingServer (started once): uri (http://...), artifacts (s3://bucket/mlflow),
                      database, env; its admin's credentials set in os.environ for the test (MLflow's variables),
                      as they are on every node
    cluster_ray       (per test) RayCluster (started once): address, head, workers, node(name).kill_raylet();
                      a test that kills a node restarts it (`RayCluster.restart`)
    cluster_dask      DaskCluster: address, scheduler, workers (resources node_a, node_b)
    tracked_ray       (per test) a local Ray instance of the test's own whose processes hold the tracking
                      server's user, as a node of a cluster holds its own
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import dask_nodes, network, ray_nodes, s3
from tests.support import tracking_server as tracking
from tests.support.fixtures import own_ray, reset_ray

NODES = ("a", "b")


@pytest.fixture(scope="package")
def cluster_network() -> Iterator[network.Network]:
    with network.cluster_network(NODES) as net:
        yield net


@pytest.fixture(scope="package")
def s3_server(cluster_network, tmp_path_factory) -> Iterator[s3.S3Server]:
    with s3.s3_server(tmp_path_factory.mktemp("s3"), host=cluster_network.host_ip) as server:
        yield server


@pytest.fixture
def s3_env(s3_server, monkeypatch) -> s3.S3Server:
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    return s3_server


@pytest.fixture(scope="package")
def _tracking_credentials() -> dict[str, str]:
    """The tracking server's user: the driver's and every node's own (MLflow's variables)."""
    return tracking.credentials()


@pytest.fixture(scope="package")
def _tracking_server(
    cluster_network, s3_server, _tracking_credentials, tmp_path_factory
) -> Iterator[tracking.TrackingServer]:
    with tracking.tracking_server(
        tmp_path_factory.mktemp("tracking"), s3_server, admin=_tracking_credentials, host=cluster_network.host_ip
    ) as server:
        yield server


@pytest.fixture
def tracking_server(_tracking_server, monkeypatch) -> tracking.TrackingServer:
    for key, value in _tracking_server.env.items():
        monkeypatch.setenv(key, value)
    return _tracking_server


@pytest.fixture
def tracked_ray(tracking_server) -> Iterator[None]:
    """A local Ray instance started with the tracking server's user in its environment, as every node of a
    cluster has it: the shared local instance (`local_ray`) started without it, and its training workers were
    refused by the server (401) whenever it was up before this test."""
    with own_ray(address="local", num_cpus=2, include_dashboard=False):
        yield


@pytest.fixture(scope="package")
def _cluster_ray_nodes(cluster_network, s3_server, _tracking_credentials) -> Iterator[ray_nodes.RayCluster]:
    # the head has no CPUs, as a KubeRay head: every command must run its work on the worker nodes
    with ray_nodes.ray_cluster(cluster_network, env={**s3_server.env, **_tracking_credentials}, head_cpus=0) as cluster:
        yield cluster


@pytest.fixture
def cluster_ray(_cluster_ray_nodes) -> Iterator[ray_nodes.RayCluster]:
    """The test cluster's Ray, started once per run. This process's own Ray (the shared local instance) is
    shut down first, so that a command joins the cluster; a test that kills a node brings it back."""
    reset_ray()
    yield _cluster_ray_nodes
    reset_ray()


@pytest.fixture(scope="package")
def cluster_dask(cluster_network, s3_server) -> Iterator[dask_nodes.DaskCluster]:
    with dask_nodes.dask_cluster(cluster_network, env=s3_server.env) as cluster:
        yield cluster
