"""fmctl's node health agent on EKS in the sandbox (issue 33, health.kubernetesAgent): from an
Xid in a node's kernel log to the agent's report (FmctlHealthy False) and to the node taken
out of service by the verify controller, against the agent's interval. Prints ratios; not a
test.

The run: the EKS example with the agent, three nodes (the nodes' tools,
tests/tools/verify_gate.py, answer with recorded p5en outputs). Each trial writes an Xid 145
(an NVLink5 error; AWS's node monitoring agent does not act on it, so only fmctl's loop
does) to one node's /dev/kmsg at a random moment of the agent's period (`fmctl sandbox
fault`), and polls the node every 20 ms until its condition is False and until it carries
the controller's taint (or is gone: out of service and terminated in one pass); then waits
for its replacement to be reported healthy before the next trial. The sandbox runs the agent
and the controller on its scaled clock (their interval times FMCTL_BENCH_SCALE, at least
half a second, the agent's at least two: kube_programs.NODE_MIN_INTERVAL): the figures are in
that interval's units, the issue's targets 60 s and 90 s at the default 30 s being 2 and 3 of
them. The spec says `health.interval: 90s`: the sandbox scales the interval but not a pass's
own run (health-detect.sh and the recorded tools, which are Python programs, a few tenths of
a second here), which at 30 s times 0.03 would be a third of the interval where on a node it
is a hundredth; at 90 s (2.7 s, above both floors, so agent and controller keep one
interval) it is a ninth, so the ratios still bound the real ones from above.

    python benchmarks/health_agent.py     # make bench
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from table import Row, machine
from up_sandbox import ROOT, SCALE, run

TRIALS = 3


def _status(node: dict[str, Any]) -> str:
    found = [c for c in node["status"].get("conditions") or [] if c["type"] == "FmctlHealthy"]
    return str(found[0]["status"]) if found else ""


def _out(node: dict[str, Any]) -> bool:
    return any(t["key"] == "fmctl.dev/unhealthy" for t in node["spec"].get("taints") or [])


def collect() -> tuple[list[Row], str]:
    """Xid to report and to out of service, worst of TRIALS: rows and detailed lines."""
    sys.path.insert(0, str(ROOT))
    from fmctl_sandbox import daemon
    from fmctl_sandbox.kube_programs import NODE_MIN_INTERVAL
    from tests.engine.harness import Sandbox, until
    from tests.tools import sandbox_doubles as doubles
    from tests.tools import verify_gate as gate

    home = Path(tempfile.mkdtemp(prefix="fmctl-bench-agent-"))
    sandbox = Sandbox(home, doubles.start(home, SCALE))
    data = yaml.safe_load((ROOT / "examples" / "p5en-eks-fsx-s3.yaml").read_text())
    data["metadata"]["name"] = name = "bench-health-agent"
    data["compute"]["gpuPools"][0]["count"] = 3
    data["health"] = {"kubernetesAgent": True, "interval": "90s"}
    region = data["metadata"]["region"]
    spec = home / f"{name}.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    interval = max(NODE_MIN_INTERVAL, 90.0 * SCALE)
    seen, out = [], []
    lines = []

    def healthy() -> dict[str, dict[str, Any]] | None:
        nodes = gate.nodes(sandbox, name, region)
        good = len(nodes) == 3 and all(_status(n) == "True" for n in nodes.values())
        return nodes if good else None

    try:
        sandbox.node_tools(gate.install(home / "gate"))
        run(home, "up", "-f", str(spec), "--sandbox", "--yes", "--wait-healthy")
        for trial in range(TRIALS):
            nodes = until("every node reported healthy", healthy, seconds=300)
            node = sorted(nodes)[0]
            time.sleep(random.uniform(0, interval))  # a random moment of the agent's period
            run(home, "sandbox", "fault", name, node, "--xid", "145", "--region", region)
            # From its return: the line was in the node's /dev/kmsg by then (a little
            # before, which the figures leave out; the CLI's own start-up is not the loop's).
            start = time.monotonic()
            reported = taken = 0.0
            while not taken:
                now = gate.nodes(sandbox, name, region).get(node)
                at = time.monotonic() - start
                if now is None or _out(now):
                    # Tainted, or already gone (taken out and its instance terminated in one
                    # pass of the controller, with no pod to wait for): out by now.
                    taken, reported = at, reported or at
                elif not reported and _status(now) == "False":
                    reported = at
                if at > 60 * interval:
                    log = gate.controller_log(sandbox, name, region)
                    raise SystemExit(f"{node}: not out of service after {at:.1f} s\n{log}")
                time.sleep(0.02)
            seen.append(reported)
            out.append(taken)
            lines.append(
                f"  trial {trial + 1}: {node} reported {reported:6.2f} s, "
                f"out of service {taken:6.2f} s"
            )
            until(
                f"{node} replaced",
                lambda n=node: n not in gate.nodes(sandbox, name, region),
                seconds=300,
            )
        run(home, "down", name, "--region", region, "--sandbox", "--yes")
    finally:
        daemon.stop(home)
    lines.insert(0, f"agent and controller interval {interval:.2f} s (scale {SCALE})")
    rows = [
        Row(
            "health",
            "EKS agent: Xid to FmctlHealthy false, worst s",
            round(max(seen), 2),
            "its interval s (60 s at 30 s: 2)",
            round(interval, 2),
            "<=",
            2.0,
        ),
        Row(
            "health",
            "EKS agent: Xid to node out of service, worst s",
            round(max(out), 2),
            "its interval s (90 s at 30 s: 3)",
            round(interval, 2),
            "<=",
            3.0,
        ),
    ]
    return rows, "\n".join(lines)


def main() -> None:
    print(machine())
    rows, detail = collect()
    print(detail)
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
