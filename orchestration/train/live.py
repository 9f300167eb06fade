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


class Follower:
    """Draws a board's numbers as a `Progress` of `max_steps` steps, from the first step posted."""

    def __init__(self, max_steps: int) -> None:
        self.max_steps = max_steps
        self.progress: Progress | None = None
        self.seen: dict[str, float] = {}

    def draw(self, values: dict[str, float]) -> None:
        if "step" not in values or values == self.seen:
            return
        if self.progress is None:  # the rate counts from the first step seen (a resumed run's, or a later one
            # when the first look comes late: its steps took time before this clock started)
            self.progress = Progress(self.max_steps, verb="trained", unit="steps", done=int(values["step"]))
        self.seen = dict(values)
        self.progress.update(int(values["step"]) - self.progress.done, note=note(values), eta_s=values.get("eta_s"))

    def close(self) -> None:
        """The last numbers drawn stay: on a terminal the bar, elsewhere a line (the run may have ended
        before `max_steps`)."""
        if self.progress is not None:
            self.progress.log_last()
            self.progress.close()


@contextmanager
def shown(max_steps: int, *, poll_s: float = 1.0) -> Iterator[Any]:
    """A `Board` actor for rank 0 to post to (its handle), drawn on this process until the block ends."""
    import ray

    # a handle as `post` takes it: Ray types it `ActorHandle[Board] | type[Board]` (`ray.actor.ActorProxy`), whose
    # calls type-check only on methods decorated with `ray.method`, which would import Ray with this module
    board: Any = ray.remote(num_cpus=0)(Board).remote()
    follower, stop = Follower(max_steps), threading.Event()

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
