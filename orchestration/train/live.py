"""Training's progress on the driver: one line like evaluate's and embed's (steps, rate, ETA, the best dev
error, tokens/s), a bar on a terminal and a line every 30 s elsewhere (`orchestration.adapters.progress`).

Rank 0 posts its numbers after every log window to a `Board`, a Ray actor that takes no CPU (the calls
do not wait); a thread of the driver reads the board every `poll_s` seconds while `trainer.fit()` holds
the main thread. A board works wherever the workers run, with no file shared between hosts. The
workers' own lines per log window are shown with -v only (`loop.end_of_window`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from orchestration.adapters.progress import Progress

log = logging.getLogger(__name__)


class Board:
    """The latest numbers of a training run (step, eta_s, tokens_per_s, dev_error)."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def post(self, values: dict[str, float]) -> None:
        self.values.update(values)

    def read(self) -> dict[str, float]:
        return self.values


def post(board: Any, **values: float | None) -> None:
    """Send `values` (those not None) to the board, without waiting; no board, nothing."""
    if board is not None:
        board.post.remote({key: value for key, value in values.items() if value is not None})


def note(values: dict[str, float]) -> str:
    """What follows the rate: the best dev error and the tokens per second."""
    parts = []
    if "dev_error" in values:
        parts.append(f"best dev error {100 * values['dev_error']:.1f} %")
    if "tokens_per_s" in values:
        parts.append(f"{values['tokens_per_s']:,.0f} tokens/s")
    return ", ".join(parts)


class Slowdown:
    """Whether training's tokens/s collapsed: under half the run's own early rate (the median of its `early` log
    windows after the first, which holds the warm-up) for `sustained` windows in a row spanning at least
    `sustained_s` seconds (a pause of a few seconds is no collapse). `check` returns the warning once."""

    def __init__(self, *, early: int = 3, sustained: int = 3, sustained_s: float = 60.0) -> None:
        self.early, self.sustained, self.sustained_s = early, sustained, sustained_s
        self.rates: list[float] = []
        self.slow: list[float] = []  # when each slow window of the current run of them was seen
        self.windows = 0
        self.warned = False

    def check(self, tokens_per_s: float, now: float) -> str | None:
        self.windows += 1
        if self.warned or self.windows == 1:
            return None
        if len(self.rates) < self.early:
            self.rates.append(tokens_per_s)
            return None
        before = sorted(self.rates)[len(self.rates) // 2]
        self.slow = [*self.slow, now] if tokens_per_s < before / 2 else []
        if len(self.slow) < self.sustained or now - self.slow[0] < self.sustained_s:
            return None
        self.warned = True
        return (
            f"training slowed to {tokens_per_s:,.0f} tokens/s, under half its early {before:,.0f} for "
            f"{self.sustained} log windows: another process on the same cores (the workers run at "
            "runtime.worker_niceness), or memory swapping? A run bounded by train.max_minutes reaches fewer steps"
        )


class Budget:
    """The steps a time-bounded run reached against those its own early rate predicted for the same span: the
    median steps/s of its `early` log windows after the first (the warm-up's), carried on from the end of
    them to the last step seen. `report` is the line, once the run ended before `max_steps`."""

    def __init__(self, max_minutes: float, *, early: int = 3) -> None:
        self.max_minutes, self.early = max_minutes, early
        self.seen: list[tuple[float, int]] = []  # (when, step) at the end of each log window

    def window(self, step: int, now: float) -> None:
        self.seen.append((now, step))

    def report(self, max_steps: int) -> str | None:
        if len(self.seen) < self.early + 2 or self.seen[-1][1] >= max_steps:
            return None
        rates = sorted(
            (b_step - a_step) / (b_t - a_t)
            for (a_t, a_step), (b_t, b_step) in zip(self.seen[: self.early + 1], self.seen[1 : self.early + 2])
            if b_t > a_t
        )
        if not rates:
            return None
        rate = rates[len(rates) // 2]
        (t0, step0), (t1, step1) = self.seen[self.early + 1], self.seen[-1]
        predicted = step0 + rate * (t1 - t0)
        return (
            f"train.max_minutes={self.max_minutes:g} reached {step1:,} steps; its early rate of {rate:,.1f} "
            f"steps/s predicted {predicted:,.0f} ({100 * step1 / predicted:.0f} % of them)"
        )


class Follower:
    """Draws a board's numbers as a `Progress` of `max_steps` steps, from the first step posted; warns once when
    the tokens/s collapse (`Slowdown`); a run bounded by `max_minutes` logs, at its end, the steps it reached
    against those its early rate predicted (`Budget`)."""

    def __init__(self, max_steps: int, slowdown: Slowdown | None = None, max_minutes: float | None = None) -> None:
        self.max_steps = max_steps
        self.progress: Progress | None = None
        self.seen: dict[str, float] = {}
        self.slowdown = slowdown or Slowdown()
        self.budget = Budget(max_minutes) if max_minutes is not None else None

    def draw(self, values: dict[str, float]) -> None:
        if "step" not in values or values == self.seen:
            return
        if self.progress is None:  # the rate counts from the first step seen (a resumed run's, or a later one
            # when the first look comes late: its steps took time before this clock started)
            self.progress = Progress(self.max_steps, verb="trained", unit="steps", done=int(values["step"]))
        if "tokens_per_s" in values and values.get("tokens_per_s") != self.seen.get("tokens_per_s"):
            now = time.monotonic()
            warning = self.slowdown.check(values["tokens_per_s"], now)  # once per log window posted
            if warning:
                log.warning("%s", warning)
            if self.budget is not None:
                self.budget.window(int(values["step"]), now)
        self.seen = dict(values)
        self.progress.update(int(values["step"]) - self.progress.done, note=note(values), eta_s=values.get("eta_s"))

    def close(self) -> None:
        """The last numbers drawn stay: on a terminal the bar, elsewhere a line (the run may have ended
        before `max_steps`)."""
        if self.progress is not None:
            self.progress.log_last()
            self.progress.close()
        reached = self.budget.report(self.max_steps) if self.budget is not None else None
        if reached:
            log.info("%s", reached)


@contextmanager
def shown(max_steps: int, *, max_minutes: float | None = None, poll_s: float = 1.0) -> Iterator[Any]:
    """A `Board` actor for rank 0 to post to (its handle), drawn on this process until the block ends."""
    import ray

    # a handle as `post` takes it: Ray types it `ActorHandle[Board] | type[Board]` (`ray.actor.ActorProxy`), whose
    # calls type-check only on methods decorated with `ray.method`, which would import Ray with this module
    board: Any = ray.remote(num_cpus=0)(Board).remote()
    follower, stop = Follower(max_steps, max_minutes=max_minutes), threading.Event()

    def follow() -> None:
        try:
            while not stop.wait(poll_s):
                follower.draw(ray.get(board.read.remote()))
            follower.draw(ray.get(board.read.remote()))  # the last numbers posted
        except Exception as exc:  # the progress line is a view: losing it must not fail the run
            log.debug("training progress stopped: %s", exc)

    thread = threading.Thread(target=follow, name="train-progress", daemon=True)
    thread.start()
    try:
        yield board
    finally:
        stop.set()
        thread.join(timeout=10)
        follower.close()
        try:
            ray.kill(board)
        except Exception as exc:  # Ray already shut down (an interrupt): nothing left to free
            log.debug("progress board: %s", exc)
