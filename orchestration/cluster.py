"""Ray: the one place a command connects to (or starts) a cluster, and the executor that runs
the searches of `evaluation.xsim` as Ray tasks."""
from __future__ import annotations

import os
from collections import deque
from typing import Any, Callable, Iterable, Iterator


def ensure_ray(address: str | None, *, log_to_driver: bool = True) -> None:
    """Connect to the Ray cluster at `address`, else the one `ray job submit` exports, else start a local one."""
    import ray

    from orchestration import logs

    logs.plain_ray_output()
    if not ray.is_initialized():
        ray.init(address=address or os.environ.get("RAY_ADDRESS") or "local", log_to_driver=log_to_driver,
                 logging_level=logs.ray_logging_level())


class RayExecutor:
    """`evaluation.xsim.Executor` on Ray: a value in the object store once, each call a Ray task.

    `map` keeps at most `max_in_flight` tasks submitted (default: twice the cluster's CPUs over
    `cpus_per_task`) and yields their results in call order, so the driver holds a bounded number
    of results however many tasks a search has.
    """

    def __init__(self, cpus_per_task: int = 1, max_in_flight: int | None = None) -> None:
        self.cpus_per_task, self.max_in_flight = cpus_per_task, max_in_flight

    def put(self, value: Any) -> Any:
        import ray

        return ray.put(value)

    def map(self, fn: Callable[..., Any], calls: Iterable[tuple]) -> Iterator[Any]:
        import ray

        task = ray.remote(num_cpus=self.cpus_per_task)(fn)
        limit = self.max_in_flight or max(2, 2 * int(ray.cluster_resources().get("CPU", 1)) // self.cpus_per_task)
        pending: deque = deque()
        for args in calls:
            pending.append(task.remote(*args))
            if len(pending) >= limit:
                yield ray.get(pending.popleft())
        while pending:
            yield ray.get(pending.popleft())
