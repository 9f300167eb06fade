"""A run killed (SIGKILL) at each step of a commit, then rerun (issue 71): generated over the output layer's ways of
writing (a new output staged and swapped in, an output replacing the previous one, an output written in place and
resumed), and over every filesystem-changing step a clean run of each takes.

The run happens in a forked child whose filesystem calls are counted (`os.mkdir`, `rename`, `replace`, `unlink`,
`rmdir`, an `open` for writing, and the same calls of pyarrow's local filesystem); a first child counts the steps
of a clean run, then one child per step kills itself just before that step. After each kill:

- a reader sees the previous output whole, the new one whole, or none: never a manifest naming a file that is
  missing or not the bytes it names;
- the rerun, with nothing cleaned by hand, succeeds (nothing it left is taken for a user's file);
- afterwards the folder beside it holds exactly what a clean run leaves (no staging folder, no previous output set
  aside, no temporary file), and a user's file beside it and a hard-linked snapshot of the previous output keep
  their bytes.

Mechanics only: the files are synthetic bytes; the kind is `test_stage.Records`.
"""

from __future__ import annotations

import builtins
import io
import json
import multiprocessing
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from core import stage
from core.output import OutputFolder
from tests.support.stage_kinds import MARKER, V1, V2, Records, Work, make_stage

USERS = b"a user's notes beside the output\n"
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def write_new(out: Path) -> None:
    """A new output, staged and swapped in (`stage.run`)."""
    stage.run(make_stage(OutputFolder(out, Records()), "v1"), Work("v1", V1))


def write_in_place(out: Path) -> None:
    """An output written in place, as a resumable writer does (embed's blocks, mined pairs): ownership checked,
    the names recorded, each file written, the manifest last; a rerun writes only what is missing."""
    folder = OutputFolder(out, Records())
    folder.check_replaceable()
    with folder.writing(sorted(V1)):
        for name, data in V1.items():
            target = folder.location.join(name)
            if not (target.exists() and target.read_bytes() == data):
                target.write_bytes(data)
        value = {"fingerprint": "v1", "files": sorted(V1)}
        folder.commit_in_place(json.dumps(value).encode())


def nothing(out: Path) -> None:
    """No output there yet."""


def previous_v2(out: Path) -> None:
    """A committed output of another fingerprint, to be replaced."""
    stage.run(make_stage(OutputFolder(out, Records()), "v2"), Work("v2", V2))


CASES = {
    "new output": (nothing, write_new),
    "replacing the previous output": (previous_v2, write_new),
    "in place": (nothing, write_in_place),
    "in place over the previous output": (previous_v2, write_in_place),
}


def _counting(kill_at: int | None) -> Callable[[], int]:
    """Wrap this process's filesystem-changing calls; SIGKILL just before the call numbered `kill_at` (from 0).
    Returns how many were made so far."""
    count = [0]

    def step(real: Callable[..., Any], changes: Callable[..., bool] = lambda *a, **k: True):
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if changes(*args, **kwargs):
                if count[0] == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                count[0] += 1
            return real(*args, **kwargs)

        return wrapped

    for name in ("mkdir", "rename", "replace", "unlink", "rmdir"):
        setattr(os, name, step(getattr(os, name)))
    os.open = step(os.open, lambda path, flags, *a, **k: bool(flags & _WRITE_FLAGS))
    writes = lambda file, mode="r", *a, **k: any(c in mode for c in "wax+")  # noqa: E731
    builtins.open = io.open = step(io.open, writes)

    class Local(pafs.LocalFileSystem):  # what `core.storage` does through pyarrow on a local disk
        pass

    for name in ("move", "delete_file", "delete_dir", "delete_dir_contents", "create_dir", "open_output_stream"):
        setattr(Local, name, step(getattr(pafs.LocalFileSystem, name)))
    pafs.LocalFileSystem = Local  # type: ignore[misc]
    return lambda: count[0]


def _child(send, prepare_name: str, kill_at: int | None, out: Path) -> None:
    steps = _counting(kill_at)
    CASES[prepare_name][1](out)
    send.send(steps())


def _run_in_child(case: str, kill_at: int | None, out: Path) -> tuple[int | None, int]:
    """(steps counted, exit code) of the case's write in a forked child, killed before step `kill_at`."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(send, case, kill_at, out))
    child.start()
    send.close()
    try:
        steps = receive.recv() if receive.poll(60) else None
    except EOFError:  # killed before it could say
        steps = None
    child.join(60)
    assert child.exitcode is not None, f"{case}: the child did not end"
    return steps, child.exitcode


def _tree(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"<dir>"
        for p in sorted(folder.rglob("*"))
        if p.is_file() or p.is_dir()
    }


def _setup(root: Path, case: str) -> Path:
    root.mkdir()
    (root / "notes.txt").write_bytes(USERS)
    out = root / "out"
    CASES[case][0](out)
    if (out / "a.bin").exists():  # a snapshot the way `cp -al` keeps one
        (root / "snapshot").mkdir()
        os.link(out / "a.bin", root / "snapshot" / "a.bin")
    return out


def _check_readable(out: Path, case: str, step: int) -> None:
    """What a reader finds after the kill: no manifest, or one whose files are all there with its version's
    bytes."""
    if not (out / MARKER).exists():
        return
    manifest = json.loads((out / MARKER).read_bytes())
    version = {"v1": V1, "v2": V2}[manifest["fingerprint"]]
    for name in manifest["files"]:
        assert (out / name).read_bytes() == version[name], f"{case}, killed at step {step}: {name} is not whole"


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_run_killed_at_each_step_leaves_a_whole_output_or_none_and_its_rerun_ends_as_a_clean_run(tmp_path, case):
    clean = _setup(tmp_path / "clean", case)
    steps, code = _run_in_child(case, None, clean)
    assert code == 0 and steps, f"{case}: the clean run failed ({code})"
    expected = _tree(clean.parent)
    before = _tree(tmp_path / "clean")
    snapshot = before.get("snapshot/a.bin")
    assert expected.get("out/manifest.json") and "notes.txt" in expected

    for step in range(steps):
        out = _setup(tmp_path / f"killed-{step}", case)
        _, code = _run_in_child(case, step, out)
        assert code == -signal.SIGKILL, f"{case}: the run was not killed at step {step} of {steps} (exit {code})"
        _check_readable(out, case, step)
        CASES[case][1](out)  # the rerun, in this process: nothing cleaned by hand
        after = _tree(out.parent)
        assert after == expected, f"{case}, killed at step {step} of {steps}: the rerun left {sorted(after)}"
        assert snapshot is None or (out.parent / "snapshot" / "a.bin").read_bytes() == snapshot


def test_an_output_written_in_place_over_another_keeps_only_its_own_files_and_the_next_run_is_not_refused(tmp_path):
    out = _setup(tmp_path / "root", "in place over the previous output")
    write_in_place(out)
    assert _tree(out) == {**V1, "sub": b"<dir>", MARKER: (out / MARKER).read_bytes()}  # c.bin, version 2's, gone
    write_in_place(out)
    previous_v2(out)  # and replaced whole by a staged output
    assert json.loads((out / MARKER).read_bytes())["fingerprint"] == "v2"
