"""Run a benchmark's in-process training loop under the Ray training workers' environment.

A training worker starts with `runtime.worker_env` (glibc malloc settings: one arena, nothing trimmed or
mmapped per step). A loop timed in a process without them pays page faults on every large tensor: the
multidomain recipe's step took 1.4x as long (154 against 112 ms median, 2-core, 2026-11-29), more for a wider
batch or model. glibc reads the settings at start-up only, so the process re-executes itself with them.
"""

from __future__ import annotations

import os
import sys

from orchestration.config import Config


def same_env_as_workers(config: Config) -> None:
    """Re-execute this process with `config.runtime.worker_env` where its environment differs (returns when it
    already has it)."""
    missing = {k: v for k, v in config.runtime.worker_env.items() if os.environ.get(k) != v}
    if missing:
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **missing})
