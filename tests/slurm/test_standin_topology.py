"""Both topology plugins' files through a real slurmctld 24.11 (the stand-in's Debian 13
Slurm: Debian 12's 22.05 has no topology/block), as the head node installs them.

The head node starts with fmctl's provisional topology.conf (rendered), then its
fmctl-topology timer runs slurm/lib/topology-refresh.sh on the node, as systemd runs it:
the published topology.json in, topology.conf out (slurm/lib/topology.py over `scontrol
show nodes -o`, with the node's python3), slurmctld reconfigured. Here: a
4-layer p6-b200 pool on topology/tree, its nodes given the addresses their instances would
have. GB200 UltraServer clusters get ParallelCluster's own topology/block, not fmctl's.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.catalog import load_catalog
from provisioner.render import render
from provisioner.render.context import ClusterContext, build_context
from provisioner.render.slurm import cluster_slurm_settings, node_names, topology_conf
from tests.conftest import ROOT, set_path, validate_data
from tests.tools.standin import rootfs
from tests.tools.standin.node import SSM_ENV, StandinNode
from tests.tools.standin.slurm import StandinSlurm

pytestmark = rootfs.required()
EXAMPLE = ROOT / "examples/p5-slurm-capacity-block.yaml"
POOL = ("compute", "gpuPools", 0)
BUCKET = "fmctl-artifacts-standin"


def _context(edits: list[tuple[tuple[Any, ...], Any]]) -> ClusterContext:
    data = yaml.safe_load(EXAMPLE.read_text())
    for path, value in edits:
        data = set_path(data, path, value)
    result = validate_data(data)
    assert result.ok and result.resolved is not None, result.problems
    return build_context(result.resolved, load_catalog())


@pytest.fixture(scope="module")
def image() -> Path:
    return rootfs.ensure()


def _cluster(image: Path, c: ClusterContext) -> Iterator[StandinSlurm]:
    head = StandinNode(image, "ip-10-0-0-10")
    try:
        # What the head node has before slurmctld first starts (on-head-node-start.sh).
        head.write("/opt/slurm/etc/topology.conf", topology_conf(c))
        declared = [(node_names(c, p), p.name) for p in c.pools]
        yield StandinSlurm(head, [], cluster_slurm_settings(c), declared)
    finally:
        head.stop()


def _install(slurm: StandinSlurm, instances: list[dict[str, Any]], style: str) -> str:
    """What the head node's fmctl-topology timer does: slurm/lib/topology-refresh.sh, run on
    the node with systemd's environment, fetches the published topology.json (the stand-in
    `aws s3 cp`), writes topology.conf with the node's python3 and reconfigures slurmctld."""
    names = slurm.scontrol("show", "hostnames", ",".join(n for n, _ in _declared(slurm)))
    for name, instance in zip(names.split(), instances, strict=False):
        slurm.scontrol("update", f"NodeName={name}", f"NodeAddr={instance['ip']}")
    head = slurm.head
    # What on-node-configured.sh leaves on the head node: fmctl's slurm/ at its home.
    shutil.copytree(ROOT / "slurm", head.path("/opt/fmctl/slurm"), dirs_exist_ok=True)
    document = json.dumps({"readAt": "now", "instances": instances})
    head.write(f"/var/lib/standin-s3/{BUCKET}/c/slurm/topology.json", document)
    script = "/opt/fmctl/slurm/lib/topology-refresh.sh"
    done = head.run(["/bin/bash", script, f"s3://{BUCKET}/c/slurm", style], env=SSM_ENV)
    assert done.returncode == 0, (done.stdout, done.stderr, slurm.log()[-3000:])
    assert "topology.conf updated" in done.stdout, done.stdout
    ping = slurm.scontrol("ping")
    assert "UP" in ping, slurm.log()[-3000:]
    return slurm.scontrol("show", "topology")


def names(c: ClusterContext) -> list[str]:
    """Each pool's node names (hostlist form)."""
    return [node_names(c, p) for p in c.pools]


def _members(slurm: StandinSlurm, line: str) -> list[str]:
    """The node names of a `scontrol show topology` line's Nodes=, expanded and sorted."""
    field = next(w for w in line.split() if w.startswith("Nodes="))
    return sorted(slurm.scontrol("show", "hostnames", field.split("=", 1)[1]).split())


def _declared(slurm: StandinSlurm) -> list[tuple[str, str]]:
    text = slurm.head.path("/opt/slurm/etc/slurm_parallelcluster.conf").read_text()
    return [
        (line.split()[0].split("=", 1)[1], "")
        for line in text.splitlines()
        if line.startswith("NodeName=")
    ]


def test_a_four_layer_tree_is_slurms_tree(image: Path) -> None:
    c = _context([((*POOL, "instanceType"), "p6-b200.48xlarge"), ((*POOL, "count"), 4)])
    assert c.topology_style == "tree"
    assert ("TopologyPlugin", "topology/tree") in cluster_slurm_settings(c)
    layers = [["nn-1", "nn-2", "nn-3", "nn-4a"]] * 3 + [["nn-1", "nn-2", "nn-3b", "nn-4b"]]
    instances = [{"ip": f"10.0.1.{i}", "networkNodes": p} for i, p in enumerate(layers, 1)]
    for slurm in _cluster(image, c):
        shown = _install(slurm, instances, c.topology_style)
        switches = {
            line.split()[0].split("=", 1)[1]: line
            for line in shown.splitlines()
            if line.startswith("SwitchName=")
        }
        # Four network layers and fmctl's root above them: levels 0 to 4.
        assert "Level=0" in switches["nn-4a"] and "Level=1" in switches["nn-3"]
        assert "Level=2" in switches["nn-2"] and "Level=3" in switches["nn-1"]
        assert "Level=4" in switches["fmctl-root"]
        assert _members(slurm, switches["nn-4a"]) == _members(slurm, "Nodes=" + names(c)[0])[:3]
        assert _members(slurm, switches["nn-4b"]) == _members(slurm, "Nodes=" + names(c)[0])[3:]


def test_parallelcluster_keeps_the_ultraserver_blocks_it_writes() -> None:
    """GB200 Capacity Blocks on ParallelCluster: ParallelCluster 3.14+ writes topology.conf
    (topology/block) itself, on create and update, so fmctl sets no TopologyPlugin, writes
    no topology.conf, and the head node runs no refresh of its own (a second writer would
    overwrite ParallelCluster's blocks every two minutes), for every pool of the cluster."""
    second = {"name": "half", "instanceType": "p6e-gb200.36xlarge", "count": 9}
    second["capacity"] = {"type": "capacity-block", "reservationId": "cr-0123456789abcdef1"}
    edits = [
        ((*POOL, "instanceType"), "p6e-gb200.36xlarge"),
        ((*POOL, "count"), 18),
        (("compute", "headNode", "instanceType"), "m7g.4xlarge"),
        (("compute", "gpuPools", 1), second),
    ]
    c = _context(edits)
    assert not c.topology_aware
    assert not [k for k, _ in cluster_slurm_settings(c) if k == "TopologyPlugin"]
    data = yaml.safe_load(EXAMPLE.read_text())
    for path, value in edits:
        data = set_path(data, path, value)
    result = validate_data(data)
    assert result.resolved is not None, result.problems
    warned = [p for p in result.problems if p.code == "ultraserver-topology"]
    assert [p.level for p in warned] == ["warning"]
    files = render(result.resolved, load_catalog()).files
    assert "slurm/topology.conf" not in files
    config = files["parallelcluster/cluster-config.yaml"]
    assert "--topology=" not in config and "on-head-node-start.sh" not in config


def test_ranks_are_ordered_by_slurms_own_tree(image: Path) -> None:
    """lib/host-order.py over the real `scontrol show topology`: nodes 1 and 3 share a
    bottom switch, 2 and 4 another, so the NCCL job's ranks go 1, 3, 2, 4."""
    c = _context([((*POOL, "instanceType"), "p5en.48xlarge"), ((*POOL, "count"), 4)])
    paths = [["nn-1", "nn-2", "nn-3a"], ["nn-1", "nn-2", "nn-3b"]] * 2
    instances = [{"ip": f"10.0.3.{i}", "networkNodes": p} for i, p in enumerate(paths, 1)]
    for slurm in _cluster(image, c):
        shown = _install(slurm, instances, c.topology_style)
        slurm.head.write("/var/tmp/topology.txt", shown)
        everyone = names(c)[0]
        done = slurm.head.run(
            [
                "python3",
                "/opt/fmctl/slurm/lib/host-order.py",
                "/var/tmp/topology.txt",
                everyone,
                "--repeat",
                "2",
            ],
            env=SSM_ENV,
        )
        assert done.returncode == 0, done.stderr
        nodes = _members(slurm, f"Nodes={everyone}")
        by_number = {int(n.rsplit("-", 1)[1]): n for n in nodes}
        want = [by_number[i] for i in (1, 3, 2, 4) for _ in range(2)]
        assert done.stdout.split() == want, (shown, done.stdout)
