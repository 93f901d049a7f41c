#!/usr/bin/env python3
"""A job's hosts in network order, for rank placement (standard library only).

Usage: host-order.py TOPOLOGY_TXT HOSTLIST [--repeat N]

TOPOLOGY_TXT is `scontrol show topology` (topology/tree: ``SwitchName=`` lines with
``Nodes=`` or ``Switches=``; topology/block: ``BlockName=`` lines with ``Nodes=``), HOSTLIST
the job's nodes as Slurm writes them (SLURM_JOB_NODELIST, e.g. ``train-st-p5-[1-4,7]``).
Prints the hosts one per line (each N times with --repeat, the form SLURM_HOSTFILE takes for
``srun --distribution=arbitrary``), ordered so that neighbouring ranks share the lowest
switch or block they can: a walk of the tree from its root, leaves in order; blocks in their
index order. Hosts the topology does not name come last, in the job's order. A ring
all-reduce then crosses each spine as few times as the placement allows (the AWS samples'
hostfile ordering sorts hosts by their network nodes for the same reason).
"""

from __future__ import annotations

import re
import sys


def expand(hostlist: str) -> list[str]:
    """Slurm's hostlist expression (``a-[1-3,5],b7``) as names, zero padding kept."""
    out: list[str] = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", hostlist):
        out.extend(_expand_one(item))
    return out


def _expand_one(item: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", item)
    if match is None:
        return [item] if item else []
    head, tail = item[: match.start()], item[match.end() :]
    names = []
    for part in match.group(1).split(","):
        low, _, high = part.partition("-")
        width = len(low)
        for n in range(int(low), int(high or low) + 1):
            names.extend(f"{head}{n:0{width}d}{rest}" for rest in _expand_one(tail) or [""])
    return names


def _fields(line: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S*)", line))


def network_order(topology: str) -> list[str]:
    """Every node the topology names, in walk order."""
    blocks: list[tuple[int, list[str]]] = []
    switches: dict[str, dict[str, str]] = {}
    for line in topology.splitlines():
        fields = _fields(line)
        if "BlockName" in fields and "Nodes" in fields:
            blocks.append((int(fields.get("BlockIndex", len(blocks))), expand(fields["Nodes"])))
        elif "SwitchName" in fields:
            switches[fields["SwitchName"]] = fields
    if blocks:
        return [n for _, nodes in sorted(blocks, key=lambda b: b[0]) for n in nodes]
    children = {name: expand(f.get("Switches", "")) for name, f in switches.items()}
    below = {c for kids in children.values() for c in kids}
    order: list[str] = []

    def walk(name: str) -> None:
        # Slurm lists under every switch all the nodes below it: a leaf's are the ones.
        if not children.get(name):
            order.extend(expand(switches.get(name, {}).get("Nodes", "")))
        for child in sorted(children.get(name, [])):
            walk(child)

    for root in sorted(set(switches) - below):
        walk(root)
    return order


def host_order(topology: str, hostlist: str) -> list[str]:
    """The job's hosts, network order first, the rest after."""
    hosts = expand(hostlist)
    wanted = set(hosts)
    seen: set[str] = set()
    ordered = []
    for name in network_order(topology):
        if name in wanted and name not in seen:
            ordered.append(name)
            seen.add(name)
    return ordered + [h for h in hosts if h not in seen]


def main(argv: list[str]) -> int:
    args = argv[1:]
    repeat = 1
    if "--repeat" in args:
        i = args.index("--repeat")
        repeat = int(args[i + 1])
        del args[i : i + 2]
    if len(args) != 2 or repeat < 1:
        print("usage: host-order.py TOPOLOGY_TXT HOSTLIST [--repeat N]", file=sys.stderr)
        return 2
    with open(args[0], encoding="utf-8") as f:
        topology = f.read()
    for host in host_order(topology, args[1]):
        for _ in range(repeat):
            print(host)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
