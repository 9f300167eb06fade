"""The sums of a log window (between two progress lines) and the metrics they give."""
from __future__ import annotations

import logging
import math
import time
from typing import Any, Callable

import torch

from orchestration.train.distributed import all_sum

log = logging.getLogger("interlingua.train")


class Window:
    """Sums between two log lines: NLL and tokens per target language, ranking loss, wall and CPU time.

    `wall_clock` and `cpu_clock` (seconds) default to the monotonic clock and this process's CPU time.
    """

    def __init__(self, languages: list[str], *, wall_clock: Callable[[], float] = time.monotonic,
                 cpu_clock: Callable[[], float] = time.process_time) -> None:
        self.languages = languages
        self.wall_clock, self.cpu_clock = wall_clock, cpu_clock
        self.reset()

    def reset(self) -> None:
        self.nll = dict.fromkeys(self.languages, 0.0)
        self.tokens = dict.fromkeys(self.languages, 0.0)
        self.loss = self.ranking = self.steps = self.input_tokens = 0.0
        self.start, self.cpu_start = self.wall_clock(), self.cpu_clock()

    def add(self, out: dict[str, Any], input_tokens: int) -> None:
        # sums stay tensors on the model's device: a float() per step would wait for the GPU every step
        for lang, value in out["nll"].items():
            self.nll[lang] += value.detach()
            self.tokens[lang] += out["tokens"][lang]
        self.loss += out["loss"].detach()
        if out["ranking"] is not None:
            self.ranking += out["ranking"].detach()
        self.steps += 1
        self.input_tokens += input_tokens

    def metrics(self, device: torch.device) -> dict[str, float]:
        """Summed over workers; per-language perplexity of the decoders.

        `train/cpu_cores` is the CPU time of the worker processes (all their
        threads) per second of the window: about `cpus_per_worker` x workers
        when the CPUs are theirs, less when something else takes them or the
        workers wait (for data, a GPU, each other).
        """
        keys = self.languages
        cpu_seconds = self.cpu_clock() - self.cpu_start
        values = all_sum([float(v) for v in (
            [self.nll[k] for k in keys] + [self.tokens[k] for k in keys]
            + [self.loss, self.ranking, self.steps, self.input_tokens, cpu_seconds]
        )], device)
        n = len(keys)
        nll, tokens, (loss, ranking, steps, input_tokens, cpu_seconds) = values[:n], values[n:2 * n], values[2 * n:]
        seconds = max(self.wall_clock() - self.start, 1e-9)
        out = {
            "train/loss": loss / max(steps, 1),
            "train/nll_per_token": sum(nll) / max(sum(tokens), 1),
            "train/tokens_per_s": (input_tokens + sum(tokens)) / seconds,
            "train/cpu_cores": cpu_seconds / seconds,
        }
        if ranking:
            out["train/ranking_loss"] = ranking / max(steps, 1)
        for lang, s, t in zip(keys, nll, tokens):
            if t:
                out[f"train/ppl/{lang}"] = math.exp(min(s / t, 50.0))
        return out


def log_progress(step: int, metrics: dict[str, float], elapsed: float, *, max_steps: int,
                 max_minutes: float | None) -> None:
    """One progress line: step, losses, tokens/s, learning rate, elapsed time and the ETA."""
    per_step = elapsed / step
    remaining = (max_steps - step) * per_step
    if max_minutes is not None:
        remaining = min(remaining, 60 * max_minutes - elapsed)
    log.info(
        "step %d/%d loss %.3f nll/token %.3f %s %.0f tok/s lr %.2g elapsed %.0fs ETA %.0fs",
        step, max_steps, metrics["train/loss"], metrics["train/nll_per_token"],
        f"ranking {metrics['train/ranking_loss']:.3f}" if "train/ranking_loss" in metrics else "",
        metrics["train/tokens_per_s"], metrics["train/lr"], elapsed, max(remaining, 0),
    )
