"""The peak memory (resident set) of this process while it runs a call: is the evaluation driver flat?

    result, memory = peak_rss(evaluate, config, force=True)
    memory.peak_mb, memory.start_mb, memory.growth_mb         # MiB of this process alone

The peak is the kernel's high-water mark (VmHWM), reset before the call by
writing 5 to /proc/self/clear_refs; where that is not allowed (or off Linux),
a thread samples the resident set every `interval_s` instead (it can miss a
spike shorter than that). Ray workers and the object store are other
processes and are not counted: this measures the driver.
"""

from __future__ import annotations

import resource
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATUS = Path("/proc/self/status")


@dataclass(frozen=True)
class DriverMemory:
    start_mb: float  # resident set when the call began
    peak_mb: float  # the highest resident set during the call
    method: str  # "hwm" (kernel high-water mark, exact) or "sampled"

    @property
    def growth_mb(self) -> float:
        return self.peak_mb - self.start_mb


def peak_rss(fn: Callable[..., Any], *args: Any, interval_s: float = 0.02, **kwargs: Any) -> tuple[Any, DriverMemory]:
    """Run fn(*args, **kwargs) and return (its result, the peak resident memory of this process during it)."""
    start = rss_mb()
    if _reset_high_water_mark():
        result = fn(*args, **kwargs)
        return result, DriverMemory(start, max(_status_mb("VmHWM"), start), "hwm")
    sampler = _Sampler(interval_s)
    try:
        result = fn(*args, **kwargs)
    finally:
        sampler.stop()
    return result, DriverMemory(start, max(sampler.peak, start), "sampled")


def rss_mb() -> float:
    """This process's resident set now, in MiB."""
    if STATUS.is_file():
        return _status_mb("VmRSS")
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20  # best effort: the peak so far


def _status_mb(field: str) -> float:
    for line in STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def _reset_high_water_mark() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class _Sampler:
    def __init__(self, interval_s: float) -> None:
        self.peak, self.interval_s, self.running = rss_mb(), interval_s, True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.running:
            self.peak = max(self.peak, rss_mb())
            time.sleep(self.interval_s)

    def stop(self) -> None:
        self.running = False
        self.thread.join()
        self.peak = max(self.peak, rss_mb())
