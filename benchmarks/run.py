"""`make bench`: every benchmark, one table. Not a test: wall times on a shared machine move
by a few percent between runs, so the figures are ratios against the critical path, targets
and the tools users would pick instead, recorded in benchmarks/RESULTS.md.

    python benchmarks/run.py             # the table (about 5 minutes)
    python benchmarks/run.py --detail    # and each benchmark's own detailed table
"""

from __future__ import annotations

import sys
import time

import budget
import check_scale
import day2
import health
import health_agent
import healthy_pcs
import node
import polling
import replace_pcs
import replace_slurm
import scale
import startup
import up_sandbox
import verify_gate
from table import Row, machine, render


def main(argv: list[str]) -> int:
    detail = "--detail" in argv
    rows: list[Row] = []
    start = time.perf_counter()
    for module in (
        startup,
        up_sandbox,
        day2,
        budget,
        polling,
        scale,
        check_scale,
        node,
        health,
        replace_slurm,
        replace_pcs,
        verify_gate,
        health_agent,
        healthy_pcs,
    ):
        found, text = module.collect()
        rows += found
        if detail:
            print(f"== {module.__name__}\n{text}\n")
    print(machine())
    print(render(rows))
    missed = [r for r in rows if r.met == "NO"]
    print(
        f"{len(rows)} figures, {sum(r.met == 'yes' for r in rows)} targets met, "
        f"{len(missed)} missed; {time.perf_counter() - start:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
