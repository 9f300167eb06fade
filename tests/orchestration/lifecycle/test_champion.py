"""The champion rule on its own: better by the margin, or the champion stays."""
from __future__ import annotations

import pytest

from orchestration.lifecycle.champion import beats


@pytest.mark.parametrize("challenger,champion,margin,promoted", [
    (0.10, 0.20, 0.0, True),
    (0.20, 0.20, 0.0, False),  # a tie keeps the champion
    (0.30, 0.20, 0.0, False),
    (0.16, 0.20, 0.05, False),  # better, but not by more than the margin
    (0.14, 0.20, 0.05, True),
    (0.0, 1.0, 1.0, False),  # a margin of 1.0 can never be met
])
def test_a_challenger_is_promoted_only_when_better_by_more_than_the_margin(challenger, champion, margin, promoted):
    assert beats(challenger, champion, margin) is promoted
