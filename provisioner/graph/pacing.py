"""When to look again at something that takes a documented time: dense where it most likely
finishes, sparse elsewhere."""

from __future__ import annotations

from collections.abc import Iterator

#: The pause between looks where a resource most likely finishes, in real seconds (before
#: the sandbox's scaling): a sixteenth of its expected time, within these bounds. Overruns
#: are looked at every tenth, at most MAX_LATE. No pause is shorter than MIN_POLL once scaled.
DENSE_MIN, DENSE_MAX, MAX_LATE, MIN_POLL = 5.0, 15.0, 30.0, 0.05


def poll_schedule(expected: float, scale: float = 1.0) -> Iterator[float]:
    """When to look at a resource AWS documents as taking ``expected`` seconds: offsets from
    the start, already multiplied by ``scale`` (the sandbox's clock); endless.

    Once at once (it may exist already) and once at 0.6 of the expected time; densely from
    0.75 to 1.6 times it, where real durations fall; sparsely after. Against boto3's stock
    waiters (a look every 10-30 s from the start), this makes fewer calls for everything
    that takes minutes and notices it sooner (benchmarks/polling.py prints both).
    """
    dense = min(max(expected / 16, DENSE_MIN), DENSE_MAX)
    late = min(max(expected / 10, DENSE_MIN), MAX_LATE)
    last = 0.0
    yield 0.0
    at = 0.6 * expected
    while True:
        at_scaled = max(at * scale, last + MIN_POLL)
        yield at_scaled
        last = at_scaled
        if at < 0.75 * expected:
            at = 0.75 * expected
        else:
            at += dense if at < 1.6 * expected else late
