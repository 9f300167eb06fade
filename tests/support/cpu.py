"""Where the suite's CPU goes: with INTERLINGUA_TEST_CPU=<file>, each test's machine-wide busy CPU-seconds
(`/proc/stat`: its setup, call and teardown, every process on the machine: Ray's daemons and workers, the
servers, the commands a test starts) and wall seconds, one JSON line per test appended to <file>.

Meaningful on a quiet machine with one test process (`-p no:xdist` or `-n 0`): with two, each test's figure
holds the other's. docs/testing.md, "Where the time goes"."""

from __future__ import annotations

import json
import os
import time

import pytest

_TICKS = os.sysconf("SC_CLK_TCK")


def busy_seconds() -> float:
    """CPU-seconds the whole machine has been busy since boot (every CPU's user, nice, system, irq, softirq
    and steal time)."""
    with open("/proc/stat") as stat:
        fields = stat.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / _TICKS


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    report = os.environ.get("INTERLINGUA_TEST_CPU")
    if not report:
        yield
        return
    cpu, wall = busy_seconds(), time.monotonic()
    yield
    with open(report, "a") as out:
        out.write(
            json.dumps(
                {
                    "test": item.nodeid,
                    "cpu_s": round(busy_seconds() - cpu, 1),
                    "wall_s": round(time.monotonic() - wall, 1),
                }
            )
            + "\n"
        )
