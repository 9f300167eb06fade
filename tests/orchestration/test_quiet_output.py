"""No library's chatter from the processes a command starts: `prepare --workers 2`'s Beam workers print our
lines in our format and none of Beam's, `-v` shows Beam's; no line of Ray's C++ core in a command's output."""

from __future__ import annotations

import os
import re

import pytest

from tests.support.corpus import SMALL_BOOKS
from tests.support.output import RAY_CPP, assert_no_noise, interlingua, lines

# A Beam SDK worker's own logging: Python's default format (`INFO:apache_beam.runners.worker.sdk_worker:...`),
# or a Beam logger's line in ours.
BEAM_WORKER = re.compile(r"^(DEBUG|INFO|WARNING|ERROR):|\bapache_beam\.|sdk_worker|[Ss]emi_persistent_directory")


def assert_no_library_lines(text: str) -> None:
    found = [line for line in text.splitlines() if BEAM_WORKER.search(line) or RAY_CPP.search(line)]
    assert not found, "\n".join(found)


def test_the_patterns_match_what_they_are_for():
    assert RAY_CPP.search(
        "[2026-11-29 01:51:11,171 E 6672 6672] core_worker.cc:2465: Actor with class name: "
        "'MapWorker(ReadRange->MapBatches(M))' has constructor arguments in the object store"
    )
    assert RAY_CPP.search("(raylet) [2026-11-29 01:54:12,815 I 12911 12911] logging.cc:303: Set ray log level")
    assert BEAM_WORKER.search("INFO:apache_beam.runners.worker.sdk_worker:Control channel established.")
    assert BEAM_WORKER.search("WARNING:root:apitools not found, and bigquery client libraries are not available")
    ours = "01:52:47 INFO pipelines.encode: trained BPE on 1124 sampled sentences in 0.1s: 1500 pieces"
    assert not BEAM_WORKER.search(ours) and not RAY_CPP.search(ours)


def test_the_ray_worker_line_of_ray_53727_is_held_back_by_ray_s_own_setting_and_no_other(monkeypatch):
    import logging

    from orchestration.adapters import logs

    monkeypatch.delenv("RAY_DEDUP_LOGS_SKIP_REGEX", raising=False)  # restored after the test, as logs.ENV
    monkeypatch.setattr(logging.getLogger(), "level", logging.getLogger().level)
    logs.configure(logs.DEFAULT)
    skip = re.compile(os.environ["RAY_DEDUP_LOGS_SKIP_REGEX"])  # read by Ray's driver when it imports Ray
    assert skip.search(
        "[2026-11-29 01:58:18,932 E 22706 22740] core_worker.cc:2465: Actor with class name: "
        "'PreemptionWatcher' and ID: 'ef8d9388c241b18306410c6f01000000' has constructor arguments in "
        "the object store and max_restarts > 0. If the arguments in the object store go out of scope"
    )
    # what a worker or the raylet says about the user's work stays: an out-of-memory kill, a task's error
    assert not skip.search(
        "[2026-11-29 02:00:00,000 E 12404 12404] node_manager.cc:3100: 1 Workers (tasks / "
        "actors) killed due to memory pressure (OOM)"
    )
    assert not skip.search("ValueError: the user's own error in an actor's constructor arguments")


# A process that holds the noise back, writes native lines (os.write on descriptor 2, as Ray's C++ core does)
# around a Python one, and ends as the test says: at exit, or killed mid-line.
_HOLDING = """
import os, sys
from orchestration.adapters import native_stderr
native_stderr.hold_back(sys.argv[1])
os.write(2, b"[2026-11-29 01:51:11,171 E 6672 6672] core_worker.cc:2465: Actor with class name: 'MapWorker' "
            b"has constructor arguments in the object store\\nnative kept\\n")
print("python kept", file=sys.stderr)
if sys.argv[2] == "die":
    os.write(2, b"last words, no newline")
    os._exit(7)
"""


@pytest.mark.parametrize("end", ["exit", "die"])
def test_the_program_s_own_stderr_drops_the_ray_53727_line_and_keeps_every_other_line(end):
    import subprocess
    import sys

    from orchestration.adapters import logs

    out = subprocess.run(
        [sys.executable, "-c", _HOLDING, logs.RAY_WORKER_NOISE, end], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == (7 if end == "die" else 0), out.stderr
    assert "core_worker" not in out.stderr
    assert "native kept" in out.stderr and "python kept" in out.stderr
    if end == "die":  # what a dying process writes last comes out: the filter is a process of its own
        assert out.stderr.endswith("last words, no newline")


def test_the_program_holds_the_line_back_unless_v(monkeypatch):
    import sys

    from orchestration import cli
    from orchestration.adapters import native_stderr

    held = []
    monkeypatch.setattr(native_stderr, "hold_back", held.append)
    monkeypatch.setattr(cli, "main", lambda: 0)
    for argv, expected in ((["evaluate"], 1), (["evaluate", "-v"], 0), (["--verbose", "run"], 0)):
        held.clear()
        monkeypatch.setattr(sys, "argv", ["interlingua", *argv])
        cli.console()
        assert len(held) == expected, argv


def test_a_beam_worker_logs_in_the_command_s_format():
    from orchestration.adapters import logs
    from pipelines import sdk_worker

    assert (sdk_worker.ENV, sdk_worker.FORMAT) == (logs.ENV, logs.FORMAT)  # copied: pipelines never imports them


@pytest.mark.beam
def test_prepare_on_two_worker_processes_prints_no_beam_line_and_v_shows_them(tmp_path):
    args = [
        "prepare",
        f"run_dir={tmp_path / 'run'}",
        f"prepare.sources=[{{kind: bible, books: {SMALL_BOOKS}}}]",
        "prepare.split.dev_size=20",
        "prepare.split.test_size=20",
        "prepare.spm.vocab_size=1500",
        "--workers",
        "2",
    ]
    out = interlingua(*args)
    assert_no_noise(out)
    assert_no_library_lines(out.stdout + out.stderr)
    stages = lines(out.stderr)
    # our own lines, a worker's among them (the BPE model is trained in one), in our format
    assert [line.split(" ", 2)[2].split(":")[0] for line in stages] == [
        "pipelines.prepare",
        "pipelines.encode",
        "pipelines.prepare",
    ], out.stderr
    assert lines(out.stdout)[0].startswith("tuples read 231")

    quiet = interlingua("--quiet", *args, "--force")  # the workers too: warnings only
    assert lines(quiet.stderr) == [], quiet.stderr

    verbose = interlingua("-v", *args, "--force")
    beam = [line for line in verbose.stderr.splitlines() if BEAM_WORKER.search(line)]
    assert any("sdk_worker" in line and "Control channel established" in line for line in beam), verbose.stderr
    assert sum("Python sdk harness starting" in line for line in beam) >= 2  # both workers', as Beam prints them
