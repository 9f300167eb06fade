"""Training's progress line on the driver, drawn from the numbers rank 0 posts (no Ray needed here)."""
from __future__ import annotations

import logging

from orchestration import logs
from orchestration.train.live import Follower


def test_the_driver_draws_the_posted_step_eta_dev_error_and_tokens(monkeypatch, caplog):
    monkeypatch.setenv(logs.ENV, str(logs.DEFAULT))
    caplog.set_level(logging.INFO)
    follower = Follower(max_steps=100)
    follower.draw({})  # nothing posted yet: nothing drawn
    follower.draw({"start_step": 40, "step": 40})  # a run resumed at step 40
    follower.draw({"start_step": 40, "step": 60, "eta_s": 90.0, "tokens_per_s": 12345.6})
    follower.draw({"start_step": 40, "step": 100, "eta_s": 0.0, "tokens_per_s": 12000.0, "dev_error": 0.123})
    follower.close()
    (line,) = [r.getMessage() for r in caplog.records]  # the last step is logged; the others within 30 s
    assert line.startswith("trained 100/100 steps (100 %), ")
    assert line.endswith("ETA 0:00:00, best dev error 12.3 %, 12,000 tokens/s")
