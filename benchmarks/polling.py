"""Waiting on AWS: calls made and delay between a resource becoming ready and fmctl noticing,
fmctl's pacing (provisioner.graph.pacing.poll_schedule, the code `up` runs) against boto3's
stock waiters (their delays read from botocore's own waiter models). Prints a table.

Each resource's real duration varies; every figure is the mean over 400 durations drawn
uniformly from 0.7 to 1.6 times the documented one (fixed seed). A stock waiter looks at
once, then every `delay` seconds; FSx has no boto3 waiter, so its users loop like EKS's and
CloudFormation's (30 s).

    python benchmarks/polling.py         # part of make bench
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
import sys
from pathlib import Path

from table import Row

ROOT = Path(__file__).resolve().parent.parent
_RNG = random.Random(7)
FACTORS = [_RNG.uniform(0.7, 1.6) for _ in range(400)]

#: resource, documented seconds (the engine's kinds), stock waiter (service, name) or None.
CASES = [
    ("NAT gateway", 120.0, ("ec2", "NatGatewayAvailable")),
    ("FSx for Lustre file system", 600.0, None),
    ("FSx S3 association", 420.0, None),
    ("EKS cluster", 600.0, ("eks", "ClusterActive")),
    ("EKS managed node group", 300.0, ("eks", "NodegroupActive")),
    ("EKS add-on", 60.0, ("eks", "AddonActive")),
    ("ParallelCluster (CloudFormation)", 1200.0, ("cloudformation", "StackCreateComplete")),
]
LOOP_DELAY = 30.0


def ours(expected: float, actual: float) -> tuple[int, float]:
    """Calls and notice delay of fmctl's schedule for a resource ready after ``actual``."""
    from provisioner.graph.pacing import poll_schedule

    for calls, at in enumerate(poll_schedule(expected), start=1):
        if at >= actual:
            return calls, at - actual
    raise AssertionError("unreachable")


def stock(delay: float, actual: float) -> tuple[int, float]:
    """Calls and notice delay of a waiter that looks at once, then every ``delay``."""
    looks = math.ceil(actual / delay)
    return looks + 1, looks * delay - actual


def collect() -> tuple[list[Row], str]:
    """Each kind's mean calls and notice delay, fmctl's against the stock waiter's."""
    sys.path.insert(0, str(ROOT))
    import botocore.session

    session = botocore.session.get_session()
    lines = [
        f"{'resource':<34} {'expected s':>10} {'fmctl calls':>11} {'fmctl delay s':>13} "
        f"{'stock waiter':<34} {'calls':>6} {'delay s':>8} {'calls ratio':>11} {'delay ratio':>11}"
    ]
    rows = []
    for name, expected, waiter in CASES:
        if waiter:
            model = session.get_waiter_model(waiter[0]).get_waiter(waiter[1])
            delay, label = float(model.delay), f"{waiter[0]} {waiter[1]} ({model.delay} s)"
        else:
            delay, label = LOOP_DELAY, f"none; a {LOOP_DELAY:.0f} s loop"
        mine = [ours(expected, expected * f) for f in FACTORS]
        theirs = [stock(delay, expected * f) for f in FACTORS]
        m_calls = statistics.mean(c for c, _ in mine)
        m_delay = statistics.mean(d for _, d in mine)
        s_calls = statistics.mean(c for c, _ in theirs)
        s_delay = statistics.mean(d for _, d in theirs)
        lines.append(
            f"{name:<34} {expected:>10.0f} {m_calls:>11.1f} {m_delay:>13.1f} {label:<34} "
            f"{s_calls:>6.1f} {s_delay:>8.1f} {m_calls / s_calls:>11.2f} "
            f"{m_delay / s_delay if s_delay else float('nan'):>11.2f}"
        )
        against = f"{waiter[1]} waiter" if waiter else f"{LOOP_DELAY:.0f} s loop"
        rows.append(Row("waiting", f"{name}: calls", m_calls, against, s_calls, "<=", 1))
        rows.append(Row("waiting", f"{name}: notice delay s", m_delay, against, s_delay, "<=", 1))
    worst = max(ours(e, e * f)[1] for (_, e, _), f in itertools.product(CASES, FACTORS))
    lines.append(
        f"ratios < 1 favour fmctl; fmctl's worst notice delay over all cases: {worst:.1f} s"
    )
    return rows, "\n".join(lines)


def main() -> None:
    print(collect()[1])


if __name__ == "__main__":
    main()
