"""The wait pacing: sparse early, dense where real durations fall, bounded, scaled."""

from __future__ import annotations

import itertools
import math

import pytest

from provisioner.graph.pacing import DENSE_MAX, MAX_LATE, MIN_POLL, poll_schedule


def _until(expected: float, end: float, scale: float = 1.0) -> list[float]:
    return list(itertools.takewhile(lambda t: t <= end, poll_schedule(expected, scale)))


def test_first_look_at_once_then_after_most_of_the_wait() -> None:
    assert _until(600, 600)[:3] == [0.0, 360.0, 450.0]


@pytest.mark.parametrize("expected", [2.0, 60.0, 120.0, 600.0, 1200.0, 5000.0])
def test_pauses_are_bounded(expected: float) -> None:
    times = _until(expected, 3 * expected)
    assert times == sorted(times)
    dense = [b - a for a, b in itertools.pairwise(times) if 0.75 * expected <= a < 1.6 * expected]
    assert all(g <= DENSE_MAX + 1e-9 for g in dense)
    late = [b - a for a, b in itertools.pairwise(times) if a >= 1.6 * expected]
    assert all(g <= MAX_LATE + 1e-9 for g in late)


def test_scaled_for_the_sandbox_with_a_floor() -> None:
    real = _until(600, 1000)
    scaled = _until(600, 1000 * 0.01, scale=0.01)
    assert scaled[:3] == pytest.approx([t * 0.01 for t in real[:3]])
    tiny = _until(600, 1, scale=0.0001)
    assert all(b - a >= MIN_POLL - 1e-9 for a, b in itertools.pairwise(tiny))


@pytest.mark.parametrize(
    ("expected", "waiter_delay"), [(600, 30), (1200, 30), (300, 30), (420, 30)]
)
def test_fewer_calls_and_sooner_than_a_stock_waiter(expected: float, waiter_delay: float) -> None:
    """Over durations from 0.7 to 1.6 times the expected one (what benchmarks/polling.py
    prints for every resource kind)."""
    ours_calls = ours_delay = stock_calls = stock_delay = 0.0
    samples = [expected * (0.7 + 0.9 * i / 99) for i in range(100)]
    for actual in samples:
        calls, at = next((n, t) for n, t in enumerate(poll_schedule(expected), 1) if t >= actual)
        ours_calls, ours_delay = ours_calls + calls, ours_delay + at - actual
        looks = math.ceil(actual / waiter_delay)
        stock_calls += looks + 1
        stock_delay += looks * waiter_delay - actual
    assert ours_calls < stock_calls and ours_delay < stock_delay
