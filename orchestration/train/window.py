"""The sums of a log window (between two progress lines) and the metrics they give."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import torch

from model.nmt import Losses
from orchestration.train.distributed import all_sum

log = logging.getLogger("interlingua.train")


class Window:
    """Sums between two log lines: NLL and tokens per target language, ranking loss, wall and CPU time.

    `wall_clock` and `cpu_clock` (seconds) default to the monotonic clock and this process's CPU time.
    """

    def __init__(
        self,
        languages: list[str],
        *,
        wall_clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        self.languages = languages
        self.wall_clock, self.cpu_clock = wall_clock, cpu_clock
        self.reset()

    def reset(self) -> None:
        # a sum starts as 0.0 and becomes a () tensor with the first step's value added
        self.nll: dict[str, torch.Tensor | float] = dict.fromkeys(self.languages, 0.0)
        self.tokens: dict[str, torch.Tensor | float] = dict.fromkeys(self.languages, 0.0)
        self.loss: torch.Tensor | float = 0.0
        self.ranking: torch.Tensor | float = 0.0
        self.distill: torch.Tensor | float = 0.0
        self.steps = self.input_tokens = 0.0
        self.start, self.cpu_start = self.wall_clock(), self.cpu_clock()

    def add(self, out: Losses, input_tokens: int) -> None:
        # sums stay tensors on the model's device: a float() per step would wait for the GPU every step
        for lang, value in out.nll.items():
            self.nll[lang] += value.detach()
            self.tokens[lang] += out.tokens[lang]
        self.loss += out.loss.detach()
        if out.ranking is not None:
            self.ranking += out.ranking.detach()
        if out.distill is not None:
            self.distill += out.distill.detach()
        self.steps += 1
        self.input_tokens += input_tokens

    def metrics(self, device: torch.device) -> dict[str, float]:
        """Summed over workers; the NMT loss's per-token NLL and per-language perplexity when it is on.

        `train/cpu_cores` is the CPU time of the worker processes (all their
        threads) per second of the window: about `cpus_per_worker` x workers
        when the CPUs are theirs, less when something else takes them or the
        workers wait (for data, a GPU, each other).
        """
        keys = self.languages
        cpu_seconds = self.cpu_clock() - self.cpu_start
        values = all_sum(
            [
                float(v)
                for v in (
                    [self.nll[k] for k in keys]
                    + [self.tokens[k] for k in keys]
                    + [self.loss, self.ranking, self.distill, self.steps, self.input_tokens, cpu_seconds]
                )
            ],
            device,
        )
        n = len(keys)
        nll, tokens = values[:n], values[n : 2 * n]
        loss, ranking, distill, steps, input_tokens, cpu_seconds = values[2 * n :]
        seconds = max(self.wall_clock() - self.start, 1e-9)
        out = {
            "train/loss": loss / max(steps, 1),
            "train/tokens_per_s": (input_tokens + sum(tokens)) / seconds,
            "train/cpu_cores": cpu_seconds / seconds,
        }
        if sum(tokens):  # decoded tokens: the NMT loss is on
            out["train/nll_per_token"] = sum(nll) / sum(tokens)
        if ranking:
            out["train/ranking_loss"] = ranking / max(steps, 1)
        if distill:
            out["train/distill_loss"] = distill / max(steps, 1)
        for lang, s, t in zip(keys, nll, tokens):
            if t:
                out[f"train/ppl/{lang}"] = math.exp(min(s / t, 50.0))
        return out


def remaining_s(step: int, elapsed: float, *, max_steps: int, max_minutes: float | None) -> float:
    """Seconds left: the steps left at the rate so far, or the time budget left if that ends first."""
    remaining = (max_steps - step) * elapsed / max(step, 1)
    if max_minutes is not None:
        remaining = min(remaining, 60 * max_minutes - elapsed)
    return max(remaining, 0.0)


def log_progress(
    step: int, metrics: dict[str, float], elapsed: float, *, max_steps: int, max_minutes: float | None
) -> None:
    """One worker's progress line (shown with -v): step, losses (the NMT loss's per-token NLL when it
    is on), tokens/s, learning rate, elapsed time and the ETA."""
    columns = [f"step {step}/{max_steps}", f"loss {metrics['train/loss']:.3f}"]
    if "train/nll_per_token" in metrics:
        columns.append(f"nll/token {metrics['train/nll_per_token']:.3f}")
    if "train/ranking_loss" in metrics:
        columns.append(f"ranking {metrics['train/ranking_loss']:.3f}")
    if "train/distill_loss" in metrics:
        columns.append(f"distill {metrics['train/distill_loss']:.4f}")
    eta = remaining_s(step, elapsed, max_steps=max_steps, max_minutes=max_minutes)
    columns += [
        f"{metrics['train/tokens_per_s']:.0f} tok/s",
        f"lr {metrics['train/lr']:.2g}",
        f"elapsed {elapsed:.0f}s",
        f"ETA {eta:.0f}s",
    ]
    log.info("%s", " ".join(columns))
