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


def test_a_time_bounded_run_logs_the_steps_it_reached_against_its_early_rate(monkeypatch, caplog):
    """Warm-up window, three early windows at 10 steps/s, then half the rate: the run reached 1,000 + 5 x 60
    = 1,300 steps where its early rate predicted 1,000 + 10 x 60 = 1,600 (81 %). One that reached max_steps, or
    one with no windows seen, logs no such line; the driver's follower logs it at the end."""
    from orchestration.train import live

    steps = [500, 700, 800, 900, 1000, *(1000 + 50 * i for i in range(1, 7))]
    times = [5.0, 15.0, 25.0, 35.0, *(35.0 + 10 * i for i in range(1, 8))]
    budget = live.Budget(1.5)
    for step, now in zip(steps, times, strict=True):
        budget.window(step, now)
    assert budget.report(max_steps=100_000) == (
        "train.max_minutes=1.5 reached 1,300 steps; its early rate of 10.0 steps/s predicted 1,600 (81 % of them)"
    )
    assert budget.report(max_steps=1300) is None  # it reached max_steps: the time budget did not end it
    assert live.Budget(1.5).report(100) is None  # no windows seen

    monkeypatch.setenv(logs.ENV, str(logs.DEFAULT))
    caplog.set_level(logging.INFO)
    follower = Follower(max_steps=100_000, max_minutes=1.5)
    for step in steps:
        follower.draw({"step": step, "tokens_per_s": 1000.0 + step})  # a new tokens figure: a new window
    follower.close()
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("train.max_minutes=1.5 reached 1,300")]
    caplog.clear()
    untimed = Follower(max_steps=100_000)
    for step in steps:
        untimed.draw({"step": step, "tokens_per_s": 1000.0 + step})
    untimed.close()
    assert not [r for r in caplog.records if "max_minutes" in r.getMessage()]
