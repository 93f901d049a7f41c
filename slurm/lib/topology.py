#!/usr/bin/env python3
"""Slurm's topology.conf from EC2's instance topology, on the head node (standard library only).

Usage: topology.py TOPOLOGY_JSON NODES_TXT [--style tree|block]

TOPOLOGY_JSON is what `fmctl topology` publishes: {"instances": [{"ip": ..., "networkNodes":
[top, ..., bottom]}]}, the network nodes as ec2:DescribeInstanceTopology lists them, from the
top of the hierarchy to the layer the instance hangs off. NODES_TXT is `scontrol show nodes
-o`: one node per line, NodeAddr gives each Slurm node's address, so IPs become node names.

tree (topology/tree): one switch per network node; the bottom ones list Slurm nodes, the
others their child switches; a root joins the top layer, so every node stays reachable.
block (topology/block, Slurm 23.11+): one block per UltraServer (the NVLink domain: EC2
gives its instances one capacityBlockId), else one per bottom network node; BlockSizes is
the smallest block's node count (an UltraServer's, once every node is placed), so Slurm
plans in whole NVLink domains.

Nodes EC2 has not placed (powered down, or launched since the last read) go under one
switch (or block) per partition, so Slurm still keeps a job inside its queue.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict

ROOT = "fmctl-root"


def slurm_nodes(text: str) -> list[tuple[str, str, str]]:
    """(name, address, first partition) of each line of `scontrol show nodes -o`."""
    nodes = []
    for line in text.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if "NodeName" in fields:
            partition = fields.get("Partitions", "").split(",")[0] or "none"
            nodes.append((fields["NodeName"], fields.get("NodeAddr", ""), partition))
    return nodes


def layers(document: dict, nodes: list[tuple[str, str, str]]) -> tuple[dict, list[str]]:
    """network path (top to bottom) -> Slurm node names, and the names EC2 has not placed."""
    by_ip = {i["ip"]: tuple(i["networkNodes"]) for i in document.get("instances", [])}
    placed: dict[tuple[str, ...], list[str]] = defaultdict(list)
    unplaced = []
    for name, addr, partition in nodes:
        path = by_ip.get(addr)
        if path:
            placed[path].append(name)
        else:
            unplaced.append(f"{partition}\t{name}")
    return placed, unplaced


def tree(placed: dict, unplaced: list[str]) -> list[str]:
    """topology/tree lines."""
    children: dict[str, set[str]] = defaultdict(set)
    leaves: dict[str, list[str]] = defaultdict(list)
    tops: set[str] = set()
    for path, names in placed.items():
        tops.add(path[0])
        # Neither pairwise nor zip(strict=): Amazon Linux 2023 head nodes run Python 3.9.
        for parent, child in zip(path, path[1:]):  # noqa: B905, RUF007
            children[parent].add(child)
        leaves[path[-1]].extend(names)
    lines = [
        f"SwitchName={leaf} Nodes={','.join(sorted(names))}"
        for leaf, names in sorted(leaves.items())
    ]
    lines += [
        f"SwitchName={sw} Switches={','.join(sorted(kids))}"
        for sw, kids in sorted(children.items())
    ]
    for partition, names in _by_partition(unplaced).items():
        switch = f"unplaced-{partition}"
        tops.add(switch)
        lines.append(f"SwitchName={switch} Nodes={','.join(names)}")
    if tops:
        lines.append(f"SwitchName={ROOT} Switches={','.join(sorted(tops))}")
    return lines


def block(document: dict, nodes: list[tuple[str, str, str]]) -> list[str]:
    """topology/block lines."""
    where = {}
    for i in document.get("instances", []):
        path = i.get("networkNodes") or []
        domain = i.get("capacityBlockId") or (path[-1] if path else "")
        if domain:
            where[i["ip"]] = domain
    blocks: dict[str, list[str]] = defaultdict(list)
    unplaced = []
    for name, addr, partition in nodes:
        if addr in where:
            blocks[where[addr]].append(name)
        else:
            unplaced.append(f"{partition}\t{name}")
    lines = [
        f"BlockName={b} Nodes={','.join(sorted(names))}" for b, names in sorted(blocks.items())
    ]
    for partition, names in _by_partition(unplaced).items():
        lines.append(f"BlockName=unplaced-{partition} Nodes={','.join(names)}")
    # slurmctld refuses to start on a block smaller than the base block size ("children
    # count lower than bblock_node_cnt"), so the base is the smallest block written: an
    # UltraServer's size once EC2 places every node, smaller while some wait to be placed.
    sizes = [len(names) for names in blocks.values()]
    sizes += [len(names) for names in _by_partition(unplaced).values()]
    if sizes:
        lines.append(f"BlockSizes={min(sizes)}")
    return lines


def _by_partition(unplaced: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for item in unplaced:
        partition, name = item.split("\t")
        out[partition].append(name)
    return dict(sorted(out.items()))


def render(document: dict, nodes_text: str, style: str = "tree") -> str:
    """The whole topology.conf."""
    nodes = slurm_nodes(nodes_text)
    placed, unplaced = layers(document, nodes)
    body = tree(placed, unplaced) if style == "tree" else block(document, nodes)
    head = [
        f"# topology.conf (topology/{style}) written by fmctl from ec2:DescribeInstanceTopology",
        f"# read at {document.get('readAt', '?')}: {sum(map(len, placed.values()))} nodes placed, "
        f"{len(unplaced)} not (yet).",
    ]
    return "\n".join(head + body) + "\n"


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--style")]
    style = next((a.split("=", 1)[1] for a in argv if a.startswith("--style=")), "tree")
    if len(args) != 2 or style not in ("tree", "block"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    with open(args[0], encoding="utf-8") as fh:
        document = json.load(fh)
    with open(args[1], encoding="utf-8") as fh:
        nodes_text = fh.read()
    sys.stdout.write(render(document, nodes_text, style))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
