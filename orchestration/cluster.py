"""Ray: the one place a command connects to (or starts) a cluster, and the executor that runs
the shard searches of `evaluation.xsim` as Ray tasks."""
from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np


def ensure_ray(address: str | None, *, log_to_driver: bool = True) -> None:
    """Connect to the Ray cluster at `address`, else the one `ray job submit` exports, else start a local one."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address or os.environ.get("RAY_ADDRESS") or "local", log_to_driver=log_to_driver)


class RayExecutor:
    """`evaluation.xsim.Executor` on Ray: arrays in the object store once, each call a Ray task."""

    def __init__(self, cpus_per_task: int = 1) -> None:
        self.cpus_per_task = cpus_per_task

    def put(self, array: np.ndarray) -> Any:
        import ray

        return ray.put(array)

    def map(self, fn: Callable[..., Any], calls: list[tuple]) -> list[Any]:
        import ray

        task = ray.remote(num_cpus=self.cpus_per_task)(fn)
        return ray.get([task.remote(*args) for args in calls])
