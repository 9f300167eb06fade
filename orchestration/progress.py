"""Progress of long work: a bar that redraws itself on a terminal, a plain line every `every_s` seconds
elsewhere (cron, CI, `ray job submit`), both with the rate and the time left.

    progress = Progress(total, verb="embedded", unit="sentences")
    progress.update(rows)   # as work finishes, in any order
    progress.close()

Nothing is drawn under `--quiet` (`logs.QUIET`); on a terminal the bar goes to stderr, so
stdout holds the command's result alone.
"""
from __future__ import annotations

import logging
import sys
import time

from orchestration import logs

log = logging.getLogger(__name__)

BAR_WIDTH = 24


class Progress:
    """Work done out of `total`, its rate and ETA."""

    def __init__(self, total: int, *, verb: str, unit: str, every_s: float = 30.0) -> None:
        self.total, self.verb, self.unit, self.every_s = total, verb, unit, every_s
        self.done = 0
        self.start = self.last = time.monotonic()
        self.shown = logs.verbosity() > logs.QUIET
        self.tty = self.shown and sys.stderr.isatty()

    def update(self, n: int, *, note: str = "") -> None:
        """`n` more units done; `note` (e.g. a dev error) is shown after the rate."""
        self.done += n
        now = time.monotonic()
        if self.tty:
            sys.stderr.write(f"\r{self.line(now, note, bar=True)}\033[K")
            sys.stderr.flush()
        elif self.shown and (now - self.last >= self.every_s or self.done >= self.total):
            log.info("%s", self.line(now, note))
            self.last = now

    def line(self, now: float, note: str = "", *, bar: bool = False) -> str:
        rate = self.done / max(now - self.start, 1e-9)
        eta = (self.total - self.done) / rate if rate else float("inf")
        share = self.done / max(self.total, 1)
        drawn = f"[{'#' * round(BAR_WIDTH * share):<{BAR_WIDTH}}] " if bar else ""
        return (f"{self.verb} {drawn}{self.done:,}/{self.total:,} {self.unit} ({100 * share:.0f} %), "
                f"{rate:,.0f} {self.unit}/s, ETA {duration(eta)}" + (f", {note}" if note else ""))

    def close(self) -> None:
        if self.tty and self.done:
            sys.stderr.write("\n")


def duration(seconds: float) -> str:
    """H:MM:SS, or ? for an unknown time."""
    if seconds == float("inf"):
        return "?"
    minutes, s = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{s:02d}"
