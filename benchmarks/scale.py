"""Render and plan for clusters of 1 to 1,024 GPU nodes and 1 to 50 pools: wall time of the
whole `fmctl render` and `fmctl plan --offline` commands, and their peak memory, to show
growth is linear and the largest render stays under a second. Prints a table; not a test.

    python benchmarks/scale.py           # part of make bench
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from table import Row, machine

ROOT = Path(__file__).resolve().parent.parent
SHAPES = [(1, 1), (16, 1), (128, 1), (1024, 1), (1024, 10), (1024, 50)]


def spec(nodes: int, pools: int) -> dict:
    """The p5 example with ``nodes`` p5.48xlarge in ``pools`` on-demand pools."""
    data = yaml.safe_load((ROOT / "examples/p5-slurm-capacity-block.yaml").read_text())
    data["metadata"]["name"] = f"scale-{nodes}-{pools}"
    base = data["compute"]["gpuPools"][0]
    counts = [nodes // pools + (1 if i < nodes % pools else 0) for i in range(pools)]
    data["compute"]["gpuPools"] = [
        {
            **{k: v for k, v in base.items() if k not in ("capacity", "placementGroup")},
            "name": f"pool{i:02d}",
            "count": count,
            "capacity": {"type": "on-demand"},
            "placementGroup": True,
        }
        for i, count in enumerate(counts)
    ]
    return data


#: Runs fmctl in this process and reports its own peak RSS (KiB) on stderr's last line. VmHWM,
#: not getrusage's ru_maxrss: Linux carries ru_maxrss over exec from the forking parent, so a
#: large parent (run.py, with the sandbox benchmark's imports) would be measured instead.
PEAK = (
    "import runpy, sys\n"
    "sys.argv = ['fmctl', *sys.argv[1:]]\n"
    "def peak():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            return line.split()[1]\n"
    "try:\n"
    "    runpy.run_module('provisioner', run_name='__main__')\n"
    "finally:\n"
    "    print(peak(), file=sys.stderr)\n"
)


def timed(args: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS in MiB and stdout of one fmctl command, in a fresh process."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", PEAK, *args], capture_output=True, text=True, cwd=ROOT, check=False
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"fmctl {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return wall, int(done.stderr.strip().splitlines()[-1]) / 1024, done.stdout


def collect() -> tuple[list[Row], str]:
    """Every shape rendered and planned for both schedulers: rows and the detailed table."""
    folder = Path(tempfile.mkdtemp(prefix="fmctl-scale-"))
    lines = [
        f"{'nodes':>6} {'pools':>5} {'scheduler':>10} {'render s':>9} {'render MiB':>10} "
        f"{'files':>6} {'plan s':>7} {'plan MiB':>9} {'resources':>9}"
    ]
    seen: dict[tuple[int, int, str], tuple[float, float, float]] = {}
    for nodes, pools in SHAPES:
        path = folder / f"{nodes}-{pools}.yaml"
        path.write_text(yaml.safe_dump(spec(nodes, pools), sort_keys=False))
        for scheduler in ("slurm", "kubernetes"):
            out = folder / f"out-{nodes}-{pools}-{scheduler}"
            r_wall, r_mem, _ = timed(
                ["render", "-f", str(path), "-o", str(out), "--scheduler", scheduler]
            )
            files = sum(1 for p in out.rglob("*") if p.is_file())
            p_wall, p_mem, text = timed(
                ["plan", "-f", str(path), "--offline", "-o", "json", "--scheduler", scheduler]
            )
            resources = len(json.loads(text)["resources"])
            seen[nodes, pools, scheduler] = (r_wall, r_mem, p_wall)
            lines.append(
                f"{nodes:>6} {pools:>5} {scheduler:>10} {r_wall:>9.3f} {r_mem:>10.0f} "
                f"{files:>6} {p_wall:>7.3f} {p_mem:>9.0f} {resources:>9}"
            )
    lines.append("Times are whole commands (start-up included).")
    small, big = SHAPES[0], SHAPES[-1]
    rows = []
    for scheduler in ("slurm", "kubernetes"):
        one, most = seen[(*small, scheduler)], seen[(*big, scheduler)]
        nodes_only = seen[(big[0], 1, scheduler)]
        label = f"{scheduler}, {big[0]:,} nodes"
        rows += [
            Row(
                "scale", f"render, {label} in {big[1]} pools: s", most[0], "target s", 1.0, "<=", 1
            ),
            # Nodes cost nothing (a pool is one queue / node group): 1 -> 1,024 nodes ~ 1x.
            Row(
                "scale",
                f"render, {label} in 1 pool: s",
                nodes_only[0],
                "1 node, 1 pool s",
                one[0],
                "<=",
                1.25,
            ),
            Row(
                "scale", f"plan, {label} in {big[1]} pools: s", most[2], "1 node, 1 pool s", one[2]
            ),
            Row(
                "scale",
                f"render, {label} in {big[1]} pools: peak MiB",
                most[1],
                "1 node, 1 pool MiB",
                one[1],
                "<=",
                2,
            ),
        ]
    return rows, "\n".join(lines)


def main() -> None:
    print(machine())
    print(collect()[1])


if __name__ == "__main__":
    main()
