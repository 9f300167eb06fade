"""`prepare` on input that would give an empty dataset, split or language, and interrupted: exit 2 (130) with
one line naming the drops by reason, nothing published, no staging directory left. Real Bible verses."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from orchestration.cli import main
from tests.support.corpus import error_line, text_source, write_lines

ENGLISH, FRENCH, RUSSIAN = "k", "l", "r"


def no_dataset(tmp_path: Path) -> bool:
    run = tmp_path / "run"
    return not (run / "data").exists() and not list(run.glob(".data.partial-*"))


@pytest.mark.beam
def test_every_line_a_duplicate_stops_with_the_duplicate_count(tmp_path, verse, capsys):
    where = text_source(tmp_path, {"en": [verse(ENGLISH, 8, 1, 1)] * 60, "fr": [verse(FRENCH, 8, 1, 1)] * 60})
    assert main(["prepare", *where]) == 2
    line = error_line(capsys)
    assert "no training sentence to learn the BPE model from" in line and "duplicate 59" in line
    assert no_dataset(tmp_path)
    assert main(["run", *where]) == 2  # the scheduler's command: exit 2, bad input, as documented
    assert "duplicate 59" in error_line(capsys)


@pytest.mark.beam
def test_everything_filtered_out_names_the_filter(tmp_path, book_lines, capsys):
    lines = book_lines({"en": ENGLISH, "fr": FRENCH}, [8])  # Ruth
    where = text_source(tmp_path, lines)
    assert main(["prepare", *where, "prepare.filters.max_words=2"]) == 2
    line = error_line(capsys)
    assert "no training sentence" in line and f"{len(lines['en'])} read" in line and "too_long" in line
    assert no_dataset(tmp_path)


@pytest.mark.beam
@pytest.mark.parametrize("complete", ["true", "false"])
def test_a_language_column_in_the_wrong_script_names_the_wrong_script_drops(tmp_path, book_lines, capsys, complete):
    lines = book_lines({"en": ENGLISH, "fr": FRENCH, "ru": ENGLISH}, [8])  # the "ru" column is English
    where = text_source(tmp_path, lines)
    assert main(["prepare", *where, f"prepare.split.heldout_complete={complete}"]) == 2
    line = error_line(capsys)
    assert "language 'ru' kept none of its sentences" in line
    assert "dropped wrong_script" in line  # the reason that emptied it, first
    assert no_dataset(tmp_path)


def wait_for_line(proc: subprocess.Popen, text: str, *, timeout_s: float) -> str:
    """The process's stderr up to and including the first line holding `text`, read on a thread so that
    the deadline holds even when the process writes nothing; fails the test at the deadline or when the
    process ends first."""
    lines: list[str] = []
    stopped = threading.Event()  # the line was read, or the stream ended

    def read() -> None:
        try:
            for line in proc.stderr:
                lines.append(line)
                if text in line:
                    return
        finally:
            stopped.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not stopped.wait(timeout_s) or not lines or text not in lines[-1]:
        proc.kill()
        pytest.fail(f"no line with {text!r} in {timeout_s}s (exit {proc.poll()}):\n{''.join(lines)}")
    reader.join()
    return "".join(lines)


@pytest.mark.parametrize("library", ["swallows it", "raises another error"])
def test_a_sigint_that_the_job_swallows_or_turns_into_another_error_still_interrupts(library):
    """What Beam's runner may do with the KeyboardInterrupt the job's SIGINT raises in it: catch it and carry on
    (then the job would finish and publish), or re-raise it as another error."""
    from pipelines.prepare import _interrupt_is_keyboard_interrupt

    before = signal.getsignal(
        signal.SIGINT
    )  # in a pytest-xdist worker, once SIG_IGN (set by something in that process)
    with pytest.raises(KeyboardInterrupt):
        with _interrupt_is_keyboard_interrupt():
            try:
                signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt:
                if library == "raises another error":
                    raise RuntimeError("pipeline failed") from None
    assert signal.getsignal(signal.SIGINT) == before  # the handler put back


def test_sigint_during_prepare_exits_130_with_one_line_and_removes_its_staging(tmp_path, small_dataset):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(small_dataset.data_dir, run / "data")  # the previous dataset, which must stay whole
    before = {p.name: p.stat().st_size for p in (run / "data").rglob("*")}
    args = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "prepare",
        f"run_dir={run}",
        "--force",
        # the Old Testament: a job of a minute, never finished before the signal lands, however fast the machine
        f"prepare.sources=[{{kind: bible, books: {list(range(1, 40))}}}]",
        "prepare.spm.vocab_size=2000",
        "prepare.split.dev_size=40",
        "prepare.split.test_size=40",
    ]
    proc = subprocess.Popen(
        args,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    # logged once the job's SIGINT handler is in place; in one whole run (2026-11-28) the job went on after the
    # signal, finished and exited 0: the signal landed before the handler, or the runner caught the interrupt
    err = wait_for_line(proc, "pipelines.prepare: preparing ", timeout_s=120)
    proc.send_signal(signal.SIGINT)
    err += proc.stderr.read()
    proc.wait(timeout=120)
    assert proc.returncode == 130, err
    lines = [line for line in err.splitlines() if line.startswith("interlingua")]
    assert lines == ["interlingua prepare: interrupted; nothing half-done was published"], err
    assert "Traceback" not in err
    assert not list(run.glob(".data.partial-*"))
    assert {p.name: p.stat().st_size for p in (run / "data").rglob("*")} == before


@pytest.mark.beam
def test_a_corpus_on_one_long_line_and_a_column_of_random_bytes_are_one_line_errors(tmp_path, book_lines, capsys):
    ruth = book_lines({"en": ENGLISH, "fr": FRENCH}, [8])
    where = text_source(tmp_path, {"en": [" ".join(ruth["en"]) * 40], "fr": [" ".join(ruth["fr"]) * 40]})  # ~1 MB
    assert main(["prepare", *where]) == 2
    assert "sources hold only 1 records" in error_line(capsys) and no_dataset(tmp_path)

    write_lines(tmp_path / "c.en", ruth["en"])
    rng = random.Random(0)
    noise = [bytes(rng.randrange(128, 256) for _ in range(60)) for _ in ruth["fr"]]  # not UTF-8 (seeded)
    (tmp_path / "c.fr").write_bytes(b"\n".join(noise) + b"\n")
    assert main(["prepare", *where]) == 2
    line = error_line(capsys)
    assert f"fr: invalid_utf8 {len(ruth['fr'])}" in line and no_dataset(tmp_path)
