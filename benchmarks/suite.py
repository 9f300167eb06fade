"""What the test suite costs: its wall time, the worker-seconds of its tests, the slowest of them and the
modules they are in, and every test over the limit that does not say why it cannot share.

    make test-durations                                  # the whole suite, as `make test` runs it
    .venv/bin/python benchmarks/suite.py -m "$FAST"      # a tier: pytest's -m (the Makefile's FAST)
    .venv/bin/python benchmarks/suite.py --junit FILE    # a run already made (`pytest --junitxml FILE`)

A run is pytest with two processes (`-n 2 --dist loadgroup`, the Makefile's own flags) and a JUnit report in
a temporary folder; each test's seconds are its setup, call and teardown (pytest's `junit_duration_report`
"total"). On two cores the suite is CPU-bound (docs/testing.md, "Where the time goes"): the wall time is about
the worker-seconds over two, so a test's seconds are what it costs the run. A test over `--limit` seconds
(60) must say why it cannot share what other tests pay for: a "Slow (...)" sentence in its docstring or in its
module's. Those that do not are listed last; the exit status is 1 when there is one, or when the suite failed.
Measure on a quiet machine (load under 1.5 at the start): the line "load at the start" says what it was.
"""

from __future__ import annotations

import argparse
import ast
import collections
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLOW = re.compile(r"\bSlow \(")  # "Slow (what it pays for): why it cannot share", in a docstring


@dataclass(frozen=True)
class Case:
    """One test of a run, as its JUnit report has it."""

    nodeid: str  # tests/x/test_y.py::test_z[param]
    seconds: float
    outcome: str  # passed, failed, error, skipped


def read_junit(path: Path) -> list[Case]:
    """Every test case of a JUnit report that pytest wrote, with its path as pytest names it."""
    cases = []
    for case in ET.parse(path).iter("testcase"):
        module = case.get("classname", "").replace(".", "/") + ".py"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
        cases.append(Case(f"{module}::{case.get('name')}", float(case.get("time", 0.0)), outcome))
    return cases


def says_why(nodeid: str) -> bool:
    """Whether the test's docstring or its module's has a "Slow (...)" sentence (why it cannot share)."""
    path, _, name = nodeid.partition("::")
    name = name.split("[")[0].split("@")[0]
    try:
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return False
    docs = [ast.get_docstring(tree) or ""]
    docs += [
        ast.get_docstring(node) or ""
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name
    ]
    return any(SLOW.search(doc) for doc in docs)


def run_suite(markers: str | None, junit: Path) -> tuple[float, int]:
    """pytest as the Makefile runs it (the tests of `markers` only, given), with a JUnit report at `junit`;
    its wall seconds and exit status."""
    command = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider"]
    command += ["-m", markers] if markers else []
    started = time.monotonic()
    status = subprocess.run([*command, f"--junitxml={junit}"], cwd=ROOT, check=False).returncode
    return time.monotonic() - started, status


def report(cases: list[Case], wall: float | None, limit: float, top: int) -> int:
    """Print what the run cost; 1 when a test over `limit` seconds does not say why it cannot share."""
    total = sum(c.seconds for c in cases)
    outcomes = collections.Counter(c.outcome for c in cases)
    counts = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items()))
    busy = f", {wall / 60:.1f} minutes wall ({total / wall:.2f} busy workers)" if wall else ""
    print(f"{len(cases)} tests ({counts}): {total:,.0f} worker-seconds{busy}")
    print(f"\nthe {top} slowest (seconds: setup, call and teardown)")
    for case in sorted(cases, key=lambda c: -c.seconds)[:top]:
        print(f"{case.seconds:8.1f}  {case.nodeid}")
    modules: dict[str, float] = collections.defaultdict(float)
    for case in cases:
        modules[case.nodeid.split("::")[0]] += case.seconds
    print("\nby module (the ten costliest)")
    for module, seconds in sorted(modules.items(), key=lambda m: -m[1])[:10]:
        print(f"{seconds:8.1f}  {module}  ({seconds / total:.0%})")
    silent = [c for c in cases if c.seconds > limit and not says_why(c.nodeid)]
    if silent:
        print(f'\nover {limit:.0f} s with no word on why they cannot share (a "Slow (...)" sentence in the docstring):')
        for case in silent:
            print(f"{case.seconds:8.1f}  {case.nodeid}")
    else:
        print(f"\nevery test over {limit:.0f} s says why it cannot share")
    return 1 if silent else 0


def main() -> None:
    """Run the suite (or read a report) and print its costs; the exit status is 1 when the suite failed or a
    slow test gives no reason."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-m", dest="markers", help="only the tests of this marker expression (pytest's -m)")
    p.add_argument("--junit", type=Path, help="read this JUnit report instead of running the suite")
    p.add_argument("--top", type=int, default=25, help="how many of the slowest tests to list (25)")
    p.add_argument("--limit", type=float, default=60.0, help="seconds above which a test must say why (60)")
    args = p.parse_args()
    if args.junit is not None:
        sys.exit(report(read_junit(args.junit), None, args.limit, args.top))
    print(f"load at the start: {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        junit = Path(folder) / "suite.xml"
        wall, status = run_suite(args.markers, junit)
        if not junit.is_file():
            sys.exit(f"pytest wrote no report at {junit}: see its output above")
        silent = report(read_junit(junit), wall, args.limit, args.top)
        if status:
            print(f"\nthe suite failed (pytest exited {status}): see its output above")
        sys.exit(1 if status or silent else 0)


if __name__ == "__main__":
    main()
