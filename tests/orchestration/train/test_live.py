"""Training's progress line on the driver, drawn from the numbers rank 0 posts (no Ray needed here)."""

from __future__ import annotations

import logging

from orchestration.adapters import logs
from orchestration.train.live import Follower


def test_the_driver_draws_the_posted_step_eta_dev_error_and_tokens(monkeypatch, caplog):
    monkeypatch.setenv(logs.ENV, str(logs.DEFAULT))
    caplog.set_level(logging.INFO)
    follower = Follower(max_steps=100)
    follower.draw({})  # nothing posted yet: nothing drawn
    follower.draw({"step": 40})  # a run resumed at step 40
    follower.draw({"step": 60, "eta_s": 90.0, "tokens_per_s": 12345.6})
    follower.draw({"step": 100, "eta_s": 0.0, "tokens_per_s": 12000.0, "dev_error": 0.123})
    follower.close()
    (line,) = [r.getMessage() for r in caplog.records]  # the last step is logged; the others within 30 s
    assert line.startswith("trained 100/100 steps (100 %), ")
    assert line.endswith("ETA 0:00:00, best dev error 12.3 %, 12,000 tokens/s")


def test_a_first_look_after_steps_were_taken_counts_the_rate_from_there(monkeypatch):
    """The driver's first look at the board may come late (a busy machine, a pause): the steps taken before it
    are not counted as done in no time (which showed "361,637 steps/s")."""
    monkeypatch.setenv(logs.ENV, str(logs.DEFAULT))
    follower = Follower(max_steps=100)
    follower.draw({"step": 15})
    line = follower.progress.line(follower.progress.start + 2.0)
    assert line.startswith("trained 15/100 steps (15 %), 0 steps/s"), line
    follower.draw({"step": 35})
    assert follower.progress.line(follower.progress.start + 2.0).startswith("trained 35/100 steps (35 %), 10 steps/s")


def test_a_collapse_of_the_tokens_rate_is_warned_once_naming_its_likely_causes(monkeypatch, caplog):
    """Under half the early rate (the windows after the warm-up's) for three log windows spanning a minute (a
    competing process took the cores): one warning; a single slow window, a short dip or a slower but not
    collapsed rate: none."""
    from orchestration.train.live import Slowdown

    monkeypatch.setenv(logs.ENV, str(logs.DEFAULT))
    caplog.set_level(logging.WARNING)
    follower = Follower(max_steps=1000, slowdown=Slowdown(sustained_s=0))  # the windows' span: below
    rates = [900, 4000, 4200, 3900, 1500, 4100, 2600, 2500, 1900, 1800, 1700, 1600, 1500]
    for step, rate in enumerate(rates, start=1):
        follower.draw({"step": 10 * step, "tokens_per_s": float(rate)})
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "slowed to 1,700 tokens/s, under half its early 4,000" in warnings[0]
    assert "another process on the same cores" in warnings[0] and "max_minutes" in warnings[0]
    steady = Slowdown()
    assert [steady.check(r, 30.0 * i) for i, r in enumerate((900, 4000, 4000, 4000, 2100, 2100, 2100))] == [None] * 7
    brief = Slowdown()  # three slow windows within 20 s: a pause, not a collapse
    assert [
        brief.check(r, t)
        for r, t in ((4000, 0), (4000, 30), (4000, 60), (4000, 90), (100, 100), (100, 110), (100, 120))
    ] == [None] * 7
