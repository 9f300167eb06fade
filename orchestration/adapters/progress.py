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

from orchestration.adapters import logs

log = logging.getLogger(__name__)

BAR_WIDTH = 24


class Progress:
    """Work done out of `total`, its rate and ETA; `done` is where it starts (a resumed run's step)."""

    def __init__(self, total: int, *, verb: str, unit: str, every_s: float = 30.0, done: int = 0) -> None:
        self.total, self.verb, self.unit, self.every_s = total, verb, unit, every_s
        self.done = self.initial = done
        self.start = self.last = time.monotonic()
        self.shown = logs.verbosity() > logs.QUIET
        self.tty = self.shown and sys.stderr.isatty()
        self.unlogged = ""  # the line of the last update, when no line showed it (not on a terminal)

    def update(self, n: int, *, note: str = "", eta_s: float | None = None) -> None:
        """`n` more units done; `note` (e.g. a dev error) is shown after the rate; `eta_s` replaces the ETA
        of the rate so far (a time budget that ends first)."""
        self.done += n
        now = time.monotonic()
        if self.tty:
            sys.stderr.write(f"\r{self.line(now, note, bar=True, eta_s=eta_s)}\033[K")
            sys.stderr.flush()
        elif self.shown and (now - self.last >= self.every_s or self.done >= self.total):
            log.info("%s", self.line(now, note, eta_s=eta_s))
            self.last, self.unlogged = now, ""
        elif self.shown:
            self.unlogged = self.line(now, note, eta_s=eta_s)

    def line(self, now: float, note: str = "", *, bar: bool = False, eta_s: float | None = None) -> str:
        rate = (self.done - self.initial) / max(now - self.start, 1e-9)
        eta = eta_s if eta_s is not None else (self.total - self.done) / rate if rate else float("inf")
        share = self.done / max(self.total, 1)
        drawn = f"[{'#' * round(BAR_WIDTH * share):<{BAR_WIDTH}}] " if bar else ""
        return (
            f"{self.verb} {drawn}{self.done:,}/{self.total:,} {self.unit} ({100 * share:.0f} %), "
            f"{rate:,.0f} {self.unit}/s, ETA {duration(eta)}" + (f", {note}" if note else "")
        )

    def log_last(self) -> None:
        """Log the last update if no line showed it: work that ended before `total` (training on a
        time budget, an early stop)."""
        if self.unlogged:
            log.info("%s", self.unlogged)
            self.unlogged = ""

    def close(self) -> None:
        if self.tty and self.done:
            sys.stderr.write("\n")


def duration(seconds: float) -> str:
    """H:MM:SS, or ? for an unknown time."""
    if seconds == float("inf"):
        return "?"
    minutes, s = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{s:02d}"
