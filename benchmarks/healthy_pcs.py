"""Issue 33's time to healthy on AWS PCS: `up --wait-healthy` of the Slurm example on PCS in
the sandbox, its instances booted as PCS boots them on stand-in p5 nodes with a real
slurmctld (tests/tools/standin/pcs_fleet.py: the node group's nodeBootstrapped stage, which
bootstraps the node and runs fmctl's verify gate, slurmd, the nodeReady stage's NCCL pair),
against the critical path including that bootstrap and gate. Prints ratios; not a test.

- fmctl: the engine's time plus the wait until every GPU node was healthy, as `up` prints
  them;
- the critical path including bootstrap and gate: the plan's graph (each resource its
  documented time, scaled) with the nodes after their node group: the group ACTIVE, then
  the slowest node's own time from its instance's launch to the end of its nodeReady stage
  (the boot, PCS's stages, the gate, slurmd's registration) as the harness saw it. The
  queue, made after the group, is on the path only if it ends later.

The ratio is what fmctl's wait adds to the cluster's own path (the issue's target: 1.1).
Scaled by FMCTL_BENCH_SCALE as benchmarks/verify_gate.py scales it: AWS's waits, a new
instance's boot (the sandbox's model of one, eks_asg.BOOT_SECONDS) and DCGM's level-2
diagnostic (NVIDIA's "approximately two minutes", dcgmi-diag(1)); the gate's EFA loopbacks
(half a second before each of a p5's 32 devices' clients) and the scripts' own work run in
real time. Needs root and the stand-in's root filesystem; says so otherwise (about a
minute).

    python benchmarks/healthy_pcs.py     # part of make bench
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from table import Row
from up_sandbox import DCGM_LEVEL2_S, ROOT, SCALE, healthy_after, run, took

NAME, REGION = "bench-pcs-healthy", "eu-north-1"


def _prepare(node: Any, nth: int) -> None:
    from tests.tools.standin.pcs_fleet import p5_ami

    p5_ami(node)
    node.write("/etc/standin/dcgmi-diag.seconds", f"{DCGM_LEVEL2_S * SCALE:.2f}\n")


def measure() -> tuple[float, float, float, float]:
    """(engine, wait, the critical path with the nodes' boot and gate, the GPU node group's
    end on it), in seconds."""
    sys.path.insert(0, str(ROOT))
    from fmctl_sandbox import daemon
    from fmctl_sandbox.eks_asg import BOOT_SECONDS
    from tests.engine.harness import Sandbox
    from tests.tools import sandbox_doubles as doubles
    from tests.tools.standin.pcs_fleet import example_spec, running

    home = Path(tempfile.mkdtemp(prefix="fmctl-bench-pcs-"))
    spec = example_spec(home, NAME, REGION)
    _, planned = run(home, "plan", "-f", str(spec), "--offline", "-o", "json")
    finish = _finish(json.loads(planned.stdout)["resources"])
    box = Sandbox(home, doubles.start(home, SCALE))
    try:
        with running(box, REGION, NAME, _prepare, home, BOOT_SECONDS * SCALE) as fleet:
            assert fleet.controller is not None
            fleet.controller.write("/opt/slurm/etc/standin-nccl/healthy", "465.9")
            _, up = run(home, "up", "-f", str(spec), "--sandbox", "--yes", "--wait-healthy")
            ready = fleet.wait_ready(2, timeout=30)
            own = max(b.ready - b.seen for b in ready)
            run(home, "down", NAME, "--region", REGION, "--sandbox", "--yes")
    finally:
        daemon.stop(home)
        shutil.rmtree(home, ignore_errors=True)
    group = finish["pcs/node-group/train"]
    return took(up), healthy_after(up), max(max(finish.values()), group + own), group


def _finish(resources: list[dict[str, Any]]) -> dict[str, float]:
    """When each of the plan's resources is made at the earliest (scaled seconds): after
    everything it depends on, in its kind's documented time."""
    from provisioner.resources.registry import kinds

    by_id = {r["id"]: r for r in resources}
    done: dict[str, float] = {}

    def at(ident: str) -> float:
        if ident not in done:
            r = by_id[ident]
            start = max((at(d) for d in r["dependsOn"]), default=0.0)
            done[ident] = start + kinds()[r["kind"]].create_seconds * SCALE
        return done[ident]

    for ident in by_id:
        at(ident)
    return done


def collect() -> tuple[list[Row], str]:
    """The row; the parts as detail."""
    sys.path.insert(0, str(ROOT))
    from tests.tools.standin import rootfs

    why = rootfs.unavailable()
    if why is not None:
        return [], f"PCS time-to-healthy benchmark skipped: {why}"
    engine, wait, critical, group = measure()
    rows = [
        Row(
            "time to cluster",
            "PCS example up --wait-healthy, gate on: engine + wait s",
            round(engine + wait, 2),
            "critical path + a node's boot and gate s",
            round(critical, 2),
            "<=",
            1.1,
        ),
    ]
    detail = (
        f"scale {SCALE:g}: engine {engine:.2f} s + wait {wait:.2f} s; critical path "
        f"{critical:.2f} s: the GPU node group ACTIVE at {group:.2f} s, then the slowest "
        f"node's launch to nodeReady's end {critical - group:.2f} s"
    )
    return rows, detail


if __name__ == "__main__":
    rows, text = collect()
    print(text)
    for row in rows:
        print(row)
