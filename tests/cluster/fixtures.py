"""pytest fixtures of the test cluster (imported by tests/conftest.py).

    cluster_network  (session)  Network: host_ip, nodes a and b, isolated (namespaces) or why_not
    s3_server        (session)  S3Server: endpoint, bucket, env, filesystem(), client()
    s3_env           (function) the S3 server's variables set in os.environ for the test
    tracking_server  (session)  TrackingServer: uri (http://...), artifacts (s3://bucket/mlflow), database
    cluster_ray      (module)   RayCluster: address, head, workers (resources node_a, node_b), node(name).kill_raylet()
    cluster_dask     (module)   DaskCluster: address, scheduler, workers (resources node_a, node_b)

Nothing starts until a test asks for it. The Ray and Dask clusters are per module: a test may kill a node.
"""
from __future__ import annotations

from typing import Iterator

import pytest

from tests.cluster import dask_nodes, network, ray_nodes, s3, tracking_server as tracking

NODES = ("a", "b")


@pytest.fixture(scope="session")
def cluster_network() -> Iterator[network.Network]:
    with network.cluster_network(NODES) as net:
        yield net


@pytest.fixture(scope="session")
def s3_server(cluster_network, tmp_path_factory) -> Iterator[s3.S3Server]:
    with s3.s3_server(tmp_path_factory.mktemp("s3"), host=cluster_network.host_ip) as server:
        yield server


@pytest.fixture
def s3_env(s3_server, monkeypatch) -> s3.S3Server:
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    return s3_server


@pytest.fixture(scope="session")
def tracking_server(cluster_network, s3_server, tmp_path_factory) -> Iterator[tracking.TrackingServer]:
    with tracking.tracking_server(tmp_path_factory.mktemp("tracking"), s3_server,
                                  host=cluster_network.host_ip) as server:
        yield server


@pytest.fixture(scope="module")
def cluster_ray(cluster_network, s3_server) -> Iterator[ray_nodes.RayCluster]:
    with ray_nodes.ray_cluster(cluster_network, env=s3_server.env) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def cluster_dask(cluster_network, s3_server) -> Iterator[dask_nodes.DaskCluster]:
    with dask_nodes.dask_cluster(cluster_network, env=s3_server.env) as cluster:
        yield cluster
