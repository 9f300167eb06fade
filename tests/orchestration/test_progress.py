"""Progress: a bar on a terminal, a plain line now and then elsewhere, nothing under --quiet."""

from __future__ import annotations

import io
import logging

import pytest

from orchestration.adapters import logs
from orchestration.adapters.progress import Progress, duration


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def level(monkeypatch):
    def set_level(value: int) -> None:
        monkeypatch.setenv(logs.ENV, str(value))

    return set_level


def test_a_terminal_gets_one_redrawn_bar(monkeypatch, level, caplog):
    level(logs.DEFAULT)
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    progress = Progress(400, verb="embedded", unit="sentences")
    for _ in range(4):
        progress.update(100, note="dev error 0.12")
    progress.close()
    frames = terminal.getvalue().split("\r")[1:]
    assert len(frames) == 4 and terminal.getvalue().endswith("\n")
    assert frames[1].startswith("embedded [############            ] 200/400 sentences (50 %)")
    assert "sentences/s, ETA" in frames[1] and frames[1].rstrip("\n").endswith("dev error 0.12\033[K")
    assert not caplog.records  # the bar is not logged as well


def test_elsewhere_a_line_every_period_and_at_the_end(level, caplog):
    level(logs.DEFAULT)
    caplog.set_level(logging.INFO)
    progress = Progress(1000, verb="searched", unit="queries", every_s=3600)
    for _ in range(10):
        progress.update(100)
    progress.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("searched 1,000/1,000 queries (100 %)")


def test_quiet_shows_nothing(monkeypatch, level, caplog):
    level(logs.QUIET)
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    progress = Progress(10, verb="embedded", unit="sentences", every_s=0)
    progress.update(10)
    progress.close()
    assert terminal.getvalue() == "" and not caplog.records


def test_a_resumed_count_a_given_eta_and_the_last_update_of_unfinished_work(level, caplog, monkeypatch):
    level(logs.DEFAULT)
    caplog.set_level(logging.INFO)
    now = [100.0]
    monkeypatch.setattr("orchestration.adapters.progress.time.monotonic", lambda: now[0])
    progress = Progress(1000, verb="trained", unit="steps", every_s=3600, done=400)  # resumed at step 400
    now[0] = 110.0
    progress.update(50, note="best dev error 40.0 %", eta_s=125)  # a time budget that ends first
    assert not caplog.records  # within the period
    progress.log_last()  # the budget ended before step 1,000: its last numbers are logged
    progress.log_last()  # once
    (line,) = [r.getMessage() for r in caplog.records]
    assert line == "trained 450/1,000 steps (45 %), 5 steps/s, ETA 0:02:05, best dev error 40.0 %"


def test_duration():
    assert duration(3725.5) == "1:02:05" and duration(float("inf")) == "?"
