"""The log window's metrics, on clocks the test sets (no timing luck)."""
from __future__ import annotations

import math

import torch

from orchestration.train.window import Window


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_window_metrics_count_tokens_losses_and_cpu_time():
    wall, cpu = Clock(), Clock()
    window = Window(["en", "fr"], wall_clock=wall, cpu_clock=cpu)
    out = {"nll": {"fr": torch.tensor(6.0)}, "tokens": {"fr": torch.tensor(3)}, "loss": torch.tensor(2.0),
           "ranking": torch.tensor(0.5)}
    window.add(out, input_tokens=5)
    window.add({**out, "loss": torch.tensor(4.0)}, input_tokens=7)
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
    window.add({"nll": {}, "tokens": {}, "loss": torch.tensor(1.0), "ranking": None}, input_tokens=4)
    wall.now, cpu.now = 10.0, 1.0
    window.reset()
    wall.now, cpu.now = 14.0, 3.0
    metrics = window.metrics(torch.device("cpu"))
    assert metrics["train/loss"] == 0.0 and metrics["train/tokens_per_s"] == 0.0
    assert metrics["train/cpu_cores"] == 0.5  # 2 CPU-seconds in 4 s, not since the start
    assert "train/ranking_loss" not in metrics and "train/ppl/en" not in metrics
