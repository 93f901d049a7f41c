"""Code on nodes, timed where it runs: fmctl's Slurm prolog in the stand-in node
(tests/tools/standin) on a healthy recorded p5.48xlarge (8 GPUs, libfabric 2.x: 96 fi_info
entries, 32 devices), run as slurmd runs it (root, no PATH), against the time Slurm and
ParallelCluster give a job's start (ParallelCluster's slurm.conf: BatchStartTimeout=180).
And the health agent (slurm/lib/health-agent.sh) on the same node, as its systemd service
runs it: its own run against its interval (the spec's default 30 s), and its worst case
from a fault to a drained node (one interval plus one run) against what EKS's node auto
repair waits before it acts on a GPU fault (10 minutes: the EKS User Guide, "Node health").
The stand-in's tools answer at once, so this is the prolog's own cost; on a node, nvidia-smi
and fi_info add their own (each capped at 20 s by the prolog). Needs root; says so otherwise.

    python benchmarks/node.py            # part of make bench
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from table import Row

ROOT = Path(__file__).resolve().parent.parent
RUNS = 20
#: ParallelCluster's BatchStartTimeout (cookbook slurm.conf.erb): a job whose prolog takes
#: longer is requeued.
BATCH_START_TIMEOUT = 180.0
#: The health agent's default interval (spec health.interval) and EKS node auto repair's
#: wait before it acts on AcceleratedHardwareReady.
AGENT_INTERVAL = 30.0
EKS_REPAIR_WAIT = 600.0
#: What systemd gives a oneshot service: a minimal PATH, no login environment.
SERVICE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


def collect() -> tuple[list[Row], str]:
    """The prolog's median wall over ``RUNS`` runs in the stand-in node."""
    sys.path.insert(0, str(ROOT))
    from tests.tools.standin import recorded, rootfs
    from tests.tools.standin.node import StandinNode

    why = rootfs.unavailable()
    if why is not None:
        return [], f"node benchmarks skipped: {why}"
    node = StandinNode(rootfs.ensure(), "ip-10-0-16-20")
    try:
        node.write("/etc/standin/fi_info.txt", recorded.fi_info(recorded.p5_domains(32), 2))
        node.write(
            "/etc/standin/nvidia-smi.csv",
            (ROOT / "tests/data/check/nvidia-smi-healthy.csv").read_text(),
        )
        node.write(
            "/etc/fmctl/node.env",
            "FMCTL_EFA_ENABLED=true\nFMCTL_EXPECTED_GPUS=8\nFMCTL_EXPECTED_EFA=32\n",
        )
        node.write(
            "/opt/fmctl/slurm/lib/efa-devices.sh",
            (ROOT / "slurm/lib/efa-devices.sh").read_text(),
        )
        for lib in (
            "health-agent.sh",
            "health-detect.sh",
            "prolog-common.sh",
            "faults.tsv",
            "slurm-prefix.sh",
        ):
            node.write(f"/opt/fmctl/slurm/lib/{lib}", (ROOT / "slurm/lib" / lib).read_text(), 0o755)
        prolog = "/opt/slurm/etc/scripts/prolog.d/90-fmctl-node-check.sh"
        node.write(prolog, (ROOT / "slurm/prolog.d/90-fmctl-node-check.sh").read_text(), 0o755)
        walls = []
        for _ in range(RUNS):
            start = time.perf_counter()
            done = node.run([prolog], env={"SLURMD_NODENAME": "train-st-p5-1"})
            walls.append(time.perf_counter() - start)
            if done.returncode != 0:
                return [], f"the prolog failed on a healthy node: {done.stderr}"
        agent = []
        for _ in range(RUNS):
            start = time.perf_counter()
            done = node.run(["/bin/bash", "/opt/fmctl/slurm/lib/health-agent.sh"], env=SERVICE_ENV)
            agent.append(time.perf_counter() - start)
            state = node.path("/var/lib/fmctl/health/state").read_text()
            if done.returncode != 0 or not state.startswith("healthy"):
                return [], f"the health agent failed on a healthy node: {done.stderr}{state}"
    finally:
        node.stop()
    median = statistics.median(walls)
    agent_median = statistics.median(agent)
    rows = [
        Row(
            "nodes",
            "Slurm prolog on a healthy p5 (stand-in), s",
            median,
            "BatchStartTimeout",
            BATCH_START_TIMEOUT,
            "<=",
            0.05,
        ),
        Row(
            "nodes",
            "health agent run on a healthy p5 (stand-in), s",
            agent_median,
            "its interval (30 s)",
            AGENT_INTERVAL,
            "<=",
            0.05,
        ),
        Row(
            "nodes",
            "GPU fault to drained node, worst case s",
            AGENT_INTERVAL + agent_median,
            "EKS auto repair wait",
            EKS_REPAIR_WAIT,
            "<=",
            0.1,
        ),
    ]
    detail = (
        f"prolog wall over {RUNS} runs: median {median:.3f} s, max {max(walls):.3f} s "
        f"(chroot entry included); its worst case by its deadlines: 2 x 20 s + 10 s\n"
        f"health agent wall over {RUNS} runs (no slurmctld: its sinfo and scontrol calls "
        f"fail fast): median {statistics.median(agent):.3f} s, max {max(agent):.3f} s"
    )
    return rows, detail


if __name__ == "__main__":
    rows, text = collect()
    print(text)
    for row in rows:
        print(row)
