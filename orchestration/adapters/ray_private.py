"""Every use of Ray's private attributes, in one place: what Ray offers no public setting for.

Each hook names the public behaviour it stands in for. `hooks()` lists the attributes they rely on, and
tests/orchestration/test_ray_private.py fails, naming the attribute, when an upgrade of Ray removes one: the
upgrade then has to decide each again, instead of losing it without a word.

    no_cluster              a local instance on the loopback address alone (Ray's no-cluster mode)
    plain_repeat_marker     Ray's " [repeated Nx across cluster]" marker without its colour codes
    wrap_replica_grpc_port  a Serve replica's own gRPC server on the node's address, not every interface
    interruptible_trainer   a TorchTrainer that records a Ctrl+C and leaves out two callbacks it does not need
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from typing import Any


def hooks() -> list[tuple[Any, str]]:
    """(owner, attribute) of every private attribute the hooks below use."""
    from ray._private import ray_constants, ray_logging
    from ray.serve._private import replica
    from ray.train.v2.torch.torch_trainer import TorchTrainer

    return [
        (ray_constants, "ENABLE_RAY_CLUSTER"),
        (ray_logging, "_color"),
        (replica, "add_port_to_grpc_server"),
        (TorchTrainer, "_create_default_callbacks"),
        (TorchTrainer, "_register_sigint_handler"),
    ]


@contextlib.contextmanager
def no_cluster() -> Iterator[None]:
    """Ray's no-cluster mode in this process while the block runs (`cluster.loopback_only` sets the variable
    the processes it spawns read): `ray_constants.ENABLE_RAY_CLUSTER`, read by Ray at import, so it is set
    on the module itself."""
    from ray._private import ray_constants

    before = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before


def plain_repeat_marker() -> None:
    """Ray 2.x colours its " [repeated Nx across cluster]" marker with no setting to turn it off: its `_color`
    made the identity (were it renamed, the marker alone would keep its colour)."""
    from ray._private import ray_logging

    if hasattr(ray_logging, "_color"):
        ray_logging._color = _uncoloured


def _uncoloured(msg: str) -> str:
    """Ray's `_color(msg)` without the colour."""
    return msg


def wrap_replica_grpc_port(rebind: Callable[[str], str]) -> bool:
    """Ray Serve 2.60 starts a gRPC server in each replica, for calls from other deployments, on "[::]:0",
    with no option to change it (ray/serve/_private/replica.py, `_on_initialized`, after the deployment's
    constructor): its `add_port_to_grpc_server` wrapped so that the address it binds is `rebind(address)`.
    Once per process (a second replica there finds it wrapped). False when this Ray has no such function."""
    from ray.serve._private import replica

    add_port = getattr(replica, "add_port_to_grpc_server", None)
    if add_port is None:
        return False
    if getattr(add_port, "rebinds", False):
        return True

    def on_node(server: Any, address: str) -> Any:
        return add_port(server, rebind(address))

    on_node.rebinds = True  # type: ignore[attr-defined]  # a marker on the wrapper, read above
    replica.add_port_to_grpc_server = on_node
    return True


def interruptible_trainer(*, owns_ray: bool) -> type:
    """Ray Train v2's TorchTrainer (what `ray.train.torch.TorchTrainer` is in Ray 2.60) that records a SIGINT
    its own handler (set by `fit()` on the main thread) received: were `_register_sigint_handler` renamed, an
    interrupt would again exit 1 (the run still ends KILLED; test_fault_tolerance.py checks the exit code).

    It also leaves out Ray Train's datasets callback, which starts a DatasetManager actor (a process that
    imports Ray Data, about 3 CPU-seconds) for every run, datasets or none: the workers read their shards
    themselves. On a Ray instance this process started (`owns_ray`), it leaves out the placement group cleaner
    too, a detached actor (another process, about 3 CPU-seconds) that frees the workers' CPUs should the
    controller die while the instance lives on: this one ends with the process. Were either callback renamed,
    it would run again, at that cost only."""
    from ray.train.v2.torch.torch_trainer import TorchTrainer

    class InterruptibleTrainer(TorchTrainer):
        interrupted = False

        def _create_default_callbacks(self) -> list:
            callbacks = super()._create_default_callbacks()
            unneeded = {
                *(() if self.datasets else ("DatasetsCallback",)),
                *(("PlacementGroupCleanerCallback",) if owns_ray else ()),
            }
            return [c for c in callbacks if type(c).__name__ not in unneeded]

        def _register_sigint_handler(self, controller: Any) -> None:
            super()._register_sigint_handler(controller)
            graceful_abort = signal.getsignal(signal.SIGINT)

            def handler(signum: int, frame: Any) -> None:
                self.interrupted = True
                if callable(graceful_abort):
                    graceful_abort(signum, frame)  # Ray's: aborts the workers, then exits

            signal.signal(signal.SIGINT, handler)

    return InterruptibleTrainer
