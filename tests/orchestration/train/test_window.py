"""The log window's metrics, on clocks the test sets (no timing luck)."""

from __future__ import annotations

import logging
import math

import torch

from model.nmt import Losses
from orchestration.train.window import Window, log_progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_window_metrics_count_tokens_losses_and_cpu_time():
    wall, cpu = Clock(), Clock()
    window = Window(["en", "fr"], wall_clock=wall, cpu_clock=cpu)
    out = Losses(
        nll={"fr": torch.tensor(6.0)}, tokens={"fr": torch.tensor(3)}, loss=torch.tensor(2.0), ranking=torch.tensor(0.5)
    )
    window.add(out, input_tokens=5)
    window.add(out._replace(loss=torch.tensor(4.0)), input_tokens=7)
    wall.now, cpu.now = 2.0, 3.0  # 2 s of wall time, 3 CPU-seconds: 1.5 cores
    metrics = window.metrics(torch.device("cpu"))
    assert metrics == {
        "train/loss": 3.0,  # the mean over the window's steps
        "train/nll_per_token": 2.0,  # 12 / 6
        "train/tokens_per_s": (5 + 7 + 3 + 3) / 2.0,  # encoder inputs and decoder tokens
        "train/cpu_cores": 1.5,
        "train/ranking_loss": 0.5,
        "train/ppl/fr": math.exp(2.0),
    }


def test_a_reset_window_starts_from_zero_and_the_current_clocks():
    wall, cpu = Clock(), Clock()
    window = Window(["en"], wall_clock=wall, cpu_clock=cpu)
    window.add(Losses(nll={}, tokens={}, loss=torch.tensor(1.0), ranking=None), input_tokens=4)
    wall.now, cpu.now = 10.0, 1.0
    window.reset()
    wall.now, cpu.now = 14.0, 3.0
    metrics = window.metrics(torch.device("cpu"))
    assert metrics["train/loss"] == 0.0 and metrics["train/tokens_per_s"] == 0.0
    assert metrics["train/cpu_cores"] == 0.5  # 2 CPU-seconds in 4 s, not since the start
    assert "train/ranking_loss" not in metrics and "train/ppl/en" not in metrics
    assert "train/nll_per_token" not in metrics  # no decoded token: the NMT loss is off


def test_the_progress_line_has_an_nmt_column_only_when_the_nmt_loss_is_on(caplog):
    caplog.set_level(logging.INFO, logger="interlingua.train")
    ranking_only = {"train/loss": 1.5, "train/ranking_loss": 1.5, "train/tokens_per_s": 900.0, "train/lr": 0.006}
    log_progress(20, ranking_only, 10.0, max_steps=100, max_minutes=None)
    log_progress(20, {**ranking_only, "train/nll_per_token": 4.25}, 10.0, max_steps=100, max_minutes=None)
    without, with_nmt = (r.getMessage() for r in caplog.records)
    assert "nll/token" not in without and without.startswith("step 20/100 loss 1.500 ranking 1.500 900 tok/s")
    assert "loss 1.500 nll/token 4.250 ranking 1.500" in with_nmt
    assert without.endswith("elapsed 10s ETA 40s")  # 80 steps left at 0.5 s a step
