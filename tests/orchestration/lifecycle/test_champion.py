"""The champion rule on its own, on hand-made errors: better on average by the margin, no pair worse than
the budget, or the champion stays; and what the decision logs."""

from __future__ import annotations

import pytest

from orchestration.adapters import tracking
from orchestration.adapters.tracker import TrackedRun
from orchestration.lifecycle.champion import (
    PairRegression,
    Verdict,
    beats,
    decide,
    explain,
    log_decision,
    pair_regressions,
)
from tests.support.runs import store_uri

CHAMPION = {("en", "fr"): 0.10, ("fr", "en"): 0.20, ("en", "ru"): 0.30}


@pytest.mark.parametrize(
    "challenger,champion,margin,promoted",
    [
        (0.10, 0.20, 0.0, True),
        (0.20, 0.20, 0.0, False),  # a tie keeps the champion
        (0.30, 0.20, 0.0, False),
        (0.16, 0.20, 0.05, False),  # better, but not by more than the margin
        (0.15, 0.20, 0.05, False),  # better by exactly the margin (0.20 - 0.05 is 0.15000000000000002 in floats)
        (0.14, 0.20, 0.05, True),
        (0.0, 1.0, 1.0, False),  # a margin of 1.0 can never be met
    ],
)
def test_a_challenger_is_promoted_only_when_better_by_more_than_the_margin(challenger, champion, margin, promoted):
    assert beats(challenger, champion, margin) is promoted


def test_without_a_budget_no_pair_blocks():
    assert pair_regressions({("en", "fr"): 0.90}, CHAMPION, None) == ()


def test_a_pair_worse_by_more_than_the_budget_blocks_with_both_errors():
    challenger = {("en", "fr"): 0.13, ("fr", "en"): 0.21, ("en", "ru"): 0.10}  # +3, +1, -20 points
    assert pair_regressions(challenger, CHAMPION, 0.02) == (PairRegression(("en", "fr"), 0.13, 0.10),)


def test_a_pair_worse_by_exactly_the_budget_does_not_block():
    challenger = {("en", "fr"): 0.125, ("fr", "en"): 0.20, ("en", "ru"): 0.30}  # 0.125 - 0.10 > 0.025 in floats
    assert pair_regressions(challenger, CHAMPION, 0.025) == ()


def test_a_budget_of_zero_blocks_any_worse_pair_and_lists_the_worst_first():
    challenger = {("en", "fr"): 0.11, ("fr", "en"): 0.25, ("en", "ru"): 0.30}
    assert [r.name for r in pair_regressions(challenger, CHAMPION, 0.0)] == ["fr-en", "en-fr"]


def test_a_pair_the_challenger_lost_counts_as_total_failure_and_a_new_pair_cannot_regress():
    challenger = {("en", "fr"): 0.10, ("fr", "en"): 0.20, ("en", "es"): 0.99}  # no en-ru; en-es is new
    assert pair_regressions(challenger, CHAMPION, 0.5) == (PairRegression(("en", "ru"), 1.0, 0.30),)


def _decide(challenger_error: float, challenger_matrix: dict, max_pair_regression: float | None = 0.02) -> Verdict:
    return decide(
        challenger_error=challenger_error,
        champion_error=0.20,
        challenger_matrix=challenger_matrix,
        champion_matrix=CHAMPION,
        min_improvement=0.01,
        max_pair_regression=max_pair_regression,
    )


def test_better_on_average_with_every_pair_within_the_budget_is_promoted():
    verdict = _decide(0.15, {("en", "fr"): 0.115, ("fr", "en"): 0.15, ("en", "ru"): 0.20})
    assert verdict == Verdict(better=True) and verdict.promoted


def test_better_on_average_but_one_pair_beyond_the_budget_is_not_promoted():
    verdict = _decide(0.15, {("en", "fr"): 0.16, ("fr", "en"): 0.10, ("en", "ru"): 0.19})
    assert verdict.better and not verdict.promoted
    assert verdict.blocking == (PairRegression(("en", "fr"), 0.16, 0.10),)


def test_the_same_challenger_is_promoted_without_a_budget():
    assert _decide(0.15, {("en", "fr"): 0.16, ("fr", "en"): 0.10, ("en", "ru"): 0.19}, None).promoted


def test_worse_on_average_is_not_promoted_and_the_pairs_are_still_reported():
    verdict = _decide(0.25, {("en", "fr"): 0.20, ("fr", "en"): 0.25, ("en", "ru"): 0.30})
    assert not verdict.better and not verdict.promoted
    assert [r.name for r in verdict.blocking] == ["en-fr", "fr-en"]


def test_the_reason_names_both_averages_the_budget_and_each_blocking_pair_with_both_errors():
    verdict = _decide(0.15, {("en", "fr"): 0.16, ("fr", "en"): 0.10, ("en", "ru"): 0.19})
    reason = explain(
        verdict,
        challenger="v2",
        champion="v1",
        challenger_error=0.15,
        champion_error=0.20,
        min_improvement=0.01,
        max_pair_regression=0.02,
    )
    assert reason == (
        "challenger v2 15.00% vs champion v1 20.00% (needs 1.00 points better); 1 pair(s) worse "
        "than the champion's by more than 2.00 points (challenger vs champion): en-fr 16.00% vs 10.00%"
    )


def test_the_reason_lists_at_most_ten_pairs():
    blocking = tuple(PairRegression((f"l{i:02d}", "en"), 0.5, 0.1) for i in range(12))
    reason = explain(
        Verdict(True, blocking),
        challenger="v2",
        champion="v1",
        challenger_error=0.1,
        champion_error=0.2,
        min_improvement=0.0,
        max_pair_regression=0.0,
    )
    assert "l09-en 50.00% vs 10.00% and 2 more" in reason and "l10-en" not in reason


def test_the_decision_and_its_inputs_are_logged_to_the_pipeline_run(tmp_path):
    uri = store_uri(tmp_path)
    run = tracking.start_run(uri, "exp", "pipeline", {})
    verdict = Verdict(True, (PairRegression(("fr", "en"), 0.25, 0.20), PairRegression(("en", "fr"), 0.13, 0.10)))
    log_decision(
        TrackedRun(uri, run),
        verdict,
        challenger_error=0.15,
        champion_error=0.20,
        min_improvement=0.01,
        max_pair_regression=0.02,
    )
    data = tracking.get_run(uri, run).data
    assert data.metrics["register/promoted"] == 0.0 and data.metrics["register/blocking_pairs"] == 2.0
    assert data.metrics["register/challenger_error"] == 0.15 and data.metrics["register/champion_error"] == 0.20
    assert data.metrics["register/pair_regression/fr-en"] == pytest.approx(0.05)
    assert data.metrics["register/pair_regression/en-fr"] == pytest.approx(0.03)
    assert data.tags["register.min_improvement"] == "0.01" and data.tags["register.max_pair_regression"] == "0.02"
    assert data.tags["register.blocking_pairs"] == "fr-en 25.00% vs 20.00%; en-fr 13.00% vs 10.00%"


def test_a_first_model_logs_no_champion_and_no_budget(tmp_path):
    uri = store_uri(tmp_path)
    run = tracking.start_run(uri, "exp", "pipeline", {})
    log_decision(
        TrackedRun(uri, run),
        Verdict(better=True),
        challenger_error=0.15,
        champion_error=None,
        min_improvement=0.0,
        max_pair_regression=None,
    )
    data = tracking.get_run(uri, run).data
    assert data.metrics["register/promoted"] == 1.0 and "register/champion_error" not in data.metrics
    assert data.tags["register.max_pair_regression"] == "none" and data.tags["register.blocking_pairs"] == "none"
