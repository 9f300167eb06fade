"""`evaluate.translation`'s averages and MLflow tables: pairs of two languages apart from the round trips, and
each target a column of its sources' scores (the scores themselves come from a real evaluation:
tests/orchestration/evaluate/test_job.py)."""

from __future__ import annotations

from orchestration.evaluate.translation import averages, table

SCORES = {
    "en-fr": {"bleu": 10.0, "chrf": 30.0},
    "fr-en": {"bleu": 20.0, "chrf": 50.0},
    "en-en": {"bleu": 60.0, "chrf": 80.0},
    "fr-fr": {"bleu": 40.0, "chrf": 70.0},
}


def test_averages_keep_the_round_trips_apart():
    assert averages(SCORES) == {"bleu": 15.0, "chrf": 40.0, "roundtrip_bleu": 50.0, "roundtrip_chrf": 75.0}
    assert averages({"en-en": {"bleu": 1.0, "chrf": 2.0}}) == {"roundtrip_bleu": 1.0, "roundtrip_chrf": 2.0}


def test_a_table_has_a_column_per_target_and_a_row_per_source():
    assert table(SCORES, ["en", "fr", "zh"], "chrf") == {
        "source": ["en", "fr", "zh"],
        "en": [80.0, 50.0, None],
        "fr": [30.0, 70.0, None],
    }
