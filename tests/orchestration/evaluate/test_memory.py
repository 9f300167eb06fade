"""The driver's peak memory during a call: seen when it happens, not counted when it was before."""

from __future__ import annotations

import numpy as np

from tests.support.memory import DriverMemory, peak_rss


def allocate(mb: int) -> int:
    block = np.ones(mb * 2**20 // 8)  # touched: resident
    return int(block.size)


def test_peak_rss_sees_a_spike_inside_the_call_only():
    size, big = peak_rss(allocate, 300)
    assert size == 300 * 2**20 // 8 and isinstance(big, DriverMemory)
    assert 280 < big.growth_mb < 400 and big.peak_mb >= big.start_mb
    _, small = peak_rss(allocate, 20)  # the earlier 300 MB are not this call's peak
    assert small.growth_mb < 100
