"""Ray: the one place a command connects to (or starts) a cluster, and the executor that runs
the searches of `evaluation.xsim` as Ray tasks."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from evaluation.store import StoredEmbeddings
from orchestration.config.training import RuntimeConfig

if TYPE_CHECKING:
    from ray import ObjectRef


def ensure_ray(
    address: str | None,
    *,
    log_to_driver: bool = True,
    dashboard: bool = False,
    worker_niceness: int = RuntimeConfig.model_fields["worker_niceness"].default,
) -> None:
    """Connect to the Ray cluster at `address`, else the one `ray job submit` exports, else start a local one
    that listens on the loopback address only (`loopback_only`); an instance at a loopback address is joined
    as such (this driver on 127.0.0.1 too: Ray would otherwise look for it at the host's own address).

    A local instance starts Ray's dashboard only with `dashboard` (`runtime.ray_dashboard`): it is ten
    processes (the server and its modules), about 4 CPU-seconds at every command's start, for a page the
    command's own progress line makes unneeded. Its workers run at `worker_niceness` above this process
    (`runtime.worker_niceness`; Ray's own default is 15). A cluster's head decides both for itself."""
    import ray

    from orchestration.adapters import logs

    global _started_here
    logs.plain_ray_output()
    if not ray.is_initialized():
        target = address or os.environ.get("RAY_ADDRESS") or "local"
        local = target == "local"
        niceness = {_NICENESS_ENV: str(worker_niceness)} if local else {}
        with loopback_only() if local or _on_loopback(target) else contextlib.nullcontext(), _set(niceness):
            ray.init(
                address=target,
                log_to_driver=log_to_driver,
                logging_level=logs.ray_logging_level(),
                include_dashboard=dashboard if local else None,  # None, ray.init's default: the cluster's choice
            )
        _started_here = ray.get_runtime_context().gcs_address if local else None
        if local and logs.verbosity() < logs.VERBOSE:
            quiet_own_busy_cpus()


# Ray Data's warning, once per process, when a job's execution starts while no CPU is free: "... The Dataset job
# will hang unless more CPUs are freed up". On an instance this command started, every CPU is held by the
# command's own work (in `run`'s evaluation on the multidomain recipe: the previous execution of the same job,
# its read tasks still finishing, with both CPUs free as the job began); they come back, and the line only
# alarms the operator. On a cluster joined, other work may hold them: the warning stays, and with -v.
BUSY_CPUS = "Warning: The Ray cluster currently does not have any available CPUs"


class _OwnBusyCpus(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (str(record.msg).startswith(BUSY_CPUS) and owns_ray())


def quiet_own_busy_cpus() -> None:
    """Drop Ray Data's no-free-CPU warning while this process is connected to an instance of its own."""
    dataset = logging.getLogger("ray.data.dataset")  # Ray Data's module logger that emits it
    if not any(isinstance(f, _OwnBusyCpus) for f in dataset.filters):
        dataset.addFilter(_OwnBusyCpus())


# Ray's setting of its workers' niceness (`worker_niceness` of its RayConfig, 15 by default on Linux), which each
# worker applies to itself as it starts (`nice(2)`, an increment over the raylet's, which is this process's).
# Ray reads its settings from `RAY_<name>` variables, and its own job supervisor sets this one so (to 0, in its
# entrypoint's runtime_env); `ray.init` has no argument for it but `_system_config`, "testing only". Set for the
# start alone: the raylet spawned then, and the workers it spawns, keep it; a cluster joined keeps its own.
_NICENESS_ENV = "RAY_worker_niceness"


@contextlib.contextmanager
def _set(variables: dict[str, str]) -> Iterator[None]:
    """These environment variables while Ray starts (the processes it spawns inherit them), put back after."""
    before = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


_started_here: str | None = None  # the GCS address of the instance `ensure_ray` started


def owns_ray() -> bool:
    """Whether the Ray instance this process is connected to was started by it (`ensure_ray` with no
    address): it ends with this process, and everything in it with it."""
    import ray

    return ray.is_initialized() and ray.get_runtime_context().gcs_address == _started_here


def _on_loopback(address: str) -> bool:
    """Whether a Ray address ("host:port") names this host's loopback interface."""
    import ipaddress

    host = address.rpartition(":")[0].strip("[]") if ":" in address else address
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# Ray's switch for a machine that runs no cluster (its default on macOS and Windows): the node's address is the
# loopback one, and the GCS, raylet, object manager, workers and agents bind it alone. Read by Ray at import
# (`ray_constants.ENABLE_RAY_CLUSTER`) and by the processes a start spawns (the variable).
_NO_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextlib.contextmanager
def loopback_only() -> Iterator[None]:
    """While a local Ray instance starts (`ray.init(address="local")`): nothing of it listens on an address
    another host could reach. Restored afterwards, so that a later connection of this process to a real cluster
    advertises its host's address."""
    from orchestration.adapters.ray_private import no_cluster

    variable = os.environ.get(_NO_CLUSTER_ENV)
    os.environ[_NO_CLUSTER_ENV] = "0"
    try:
        with no_cluster():
            yield
    finally:
        if variable is None:
            os.environ.pop(_NO_CLUSTER_ENV, None)
        else:
            os.environ[_NO_CLUSTER_ENV] = variable


# What a Ray Data task raises when a node died under it (with the actors it held, e.g. Ray Data's own
# Parquet footer readers): the node's death is a fact of clusters, not an error of the job. Ray marks a node
# dead only once it misses its heartbeats, so a task placed there meanwhile fails; run again, it lands on a
# live node.
NODE_LOST = ["ActorDiedError", "NodeDiedError", "ActorUnavailableError", "ObjectLostError", "OwnerDiedError"]
NODE_LOST_RETRIES = 3


@contextlib.contextmanager
def data_job(*, preserve_order: bool = False) -> Iterator[None]:
    """Ray Data's settings for one of the product's jobs (this driver's `DataContext`, put back after): a map
    task that failed because a node died under it is run again (`NODE_LOST`, up to `NODE_LOST_RETRIES` times;
    any other error fails the job at once); `preserve_order` keeps the blocks' order through the job."""
    from ray.data import DataContext

    context = DataContext.get_current()
    before = (context.retried_map_errors, context.max_map_retries, context.execution_options.preserve_order)
    context.retried_map_errors, context.max_map_retries = list(NODE_LOST), NODE_LOST_RETRIES
    context.execution_options.preserve_order = preserve_order or before[2]
    try:
        yield
    finally:
        context.retried_map_errors, context.max_map_retries, context.execution_options.preserve_order = before


def check_every_node_reaches(uri: str | None = None, **locations) -> None:
    """ConfigError, before any work, when the Ray cluster (connected: `ensure_ray`) spans more than one host and
    the tracking store `uri` is a file of this host (`sqlite:///`, a path), or one of `locations` (keyword: the
    config key, value: where it is) is a local path: the workers on other hosts would each write their own
    host's copy, or find nothing. A `file://` URI stands for a filesystem every host mounts at that path."""
    import ray

    from core.location import Location
    from orchestration.config import ConfigError

    hosts = sorted({node["NodeManagerAddress"] for node in ray.nodes() if node.get("Alive")})
    if len(hosts) < 2:
        return
    spans = f"the Ray cluster spans {len(hosts)} hosts ({', '.join(hosts[:4])}{', ...' if len(hosts) > 4 else ''})"
    if uri is not None and (uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri):
        raise ConfigError(
            f"tracking.uri: {uri} is a file on this host, but {spans} and each training worker would "
            "write its own host's copy; use an MLflow server (tracking.uri=http://HOST:PORT)"
        )
    for key, location in locations.items():
        if Location.of(location, key).on_this_host:
            raise ConfigError(
                f"{key}: {location} is a path on this host, but {spans} and the workers on the others "
                f"cannot read or write it; use an object store (s3://BUCKET/...), or file:///PATH "
                "for a filesystem every host mounts at that path"
            )


def shipped(store: Any) -> Any:
    """Stored embeddings (`evaluation.store.StoredEmbeddings`) as the search tasks on any node read them: on a
    cluster of several nodes, a local folder's blocks put into Ray's object store, one object per block and
    language (`ShippedEmbeddings`; no other host can see this one's disk); a store at a URI, or any store on a
    one-node cluster (every task runs on this host), as it is."""
    import ray

    if not isinstance(store, StoredEmbeddings) or not isinstance(store.folder, Path):
        return store
    if sum(1 for node in ray.nodes() if node.get("Alive")) < 2:
        return store
    return ShippedEmbeddings.of(store)


@dataclasses.dataclass(frozen=True)
class ShippedEmbeddings(StoredEmbeddings):
    """A `StoredEmbeddings` whose blocks are objects of Ray's object store (`refs[lang][name]`), read by row
    range as the store is, from whichever node."""

    refs: dict[str, dict[str, ObjectRef[np.ndarray]]] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, store: StoredEmbeddings) -> ShippedEmbeddings:
        import ray

        refs = {
            lang: {
                name: ray.put(store.rows(lang, a, b)) for name, a, b in zip(store.names, store.starts, store.starts[1:])
            }
            for lang in store.languages
        }
        return cls(**{f.name: getattr(store, f.name) for f in dataclasses.fields(StoredEmbeddings)}, refs=refs)

    def _read(self, lang: str, name: str, a: int, b: int) -> np.ndarray:
        import ray

        return np.array(ray.get(self.refs[lang][name])[a:b])


class RayExecutor:
    """`evaluation.xsim.Executor` on Ray: a value in the object store once, each call a Ray task.

    `map` keeps at most `max_in_flight` tasks submitted (default: twice the cluster's CPUs over
    `cpus_per_task`) and yields their results in call order, so the driver holds a bounded number
    of results however many tasks a search has. The tasks run on any node: what they read comes with them
    (`put`, `shipped`).
    """

    def __init__(self, cpus_per_task: int = 1, max_in_flight: int | None = None) -> None:
        self.cpus_per_task, self.max_in_flight = cpus_per_task, max_in_flight

    def put(self, value: Any) -> Any:
        import ray

        return ray.put(value)

    def map(self, fn: Callable[..., Any], calls: Iterable[tuple]) -> Iterator[Any]:
        import ray

        task = ray.remote(num_cpus=self.cpus_per_task)(fn)
        cpus = ray.cluster_resources().get("CPU", 1)
        limit = self.max_in_flight or max(2, 2 * int(cpus) // self.cpus_per_task)
        pending: deque = deque()
        for args in calls:
            pending.append(task.remote(*args))
            if len(pending) >= limit:
                yield ray.get(pending.popleft())
        while pending:
            yield ray.get(pending.popleft())
