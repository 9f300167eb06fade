"""Where `interlingua serve` listens: loopback by default (Serve's HTTP proxy on serve.host, the replica's own
gRPC server on the node's address), without starting Ray. tests/orchestration/serve/test_server.py checks the
listeners of a running server."""

from __future__ import annotations

import inspect

from orchestration.config import load_config
from orchestration.serve.app import bind_replica_grpc, http_options, node_address


def test_the_http_proxy_listens_on_loopback_unless_serve_host_says_otherwise():
    assert http_options(load_config(None).serve) == {"host": "127.0.0.1", "port": 8000}
    assert http_options(load_config(None, ["serve.host=0.0.0.0", "serve.port=8080"]).serve) == {
        "host": "0.0.0.0",
        "port": 8080,
    }


def test_a_wildcard_grpc_address_is_bound_to_the_node_address_alone():
    assert node_address("[::]:0", "127.0.0.1") == "127.0.0.1:0"
    assert node_address("0.0.0.0:9000", "10.1.2.3") == "10.1.2.3:9000"
    assert node_address("[::]:0", "::1") == "[::1]:0"
    assert node_address("10.1.2.3:0", "127.0.0.1") == "10.1.2.3:0"  # an address chosen already stays


def test_the_replica_grpc_server_is_bound_to_the_node_address(monkeypatch):
    """Ray Serve starts the replica's gRPC server on "[::]:0" with `replica.add_port_to_grpc_server`, after the
    deployment's constructor: once the constructor has called `bind_replica_grpc`, it binds the node's address.
    The source is read too, so that a Ray that starts it otherwise fails here, not silently."""
    import ray
    from ray.serve._private import replica

    assert 'add_port_to_grpc_server(self._server, "[::]:0")' in inspect.getsource(replica.Replica._on_initialized)
    bound: list[str] = []
    monkeypatch.setattr(replica, "add_port_to_grpc_server", lambda server, address: bound.append(address) or 1)
    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "127.0.0.1")
    bind_replica_grpc()
    bind_replica_grpc()  # a second replica in the same worker process wraps it once
    assert replica.add_port_to_grpc_server(object(), "[::]:0") == 1
    assert bound == ["127.0.0.1:0"]
