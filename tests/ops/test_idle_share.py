"""The idle share `fmctl cost` reports. On EKS from Kubernetes' own objects (shaped as the API
serves them: a Node's providerID ``aws:///ZONE/INSTANCE`` and ``status.capacity``, a Pod's
``spec.nodeName``, its containers' requests and limits, ``status.phase``): a GPU node is idle
when no pending or running pod that asks for ``nvidia.com/gpu`` is placed on it. On Slurm
from cluster-health.sh's answer (the recorded one of tests/check/test_health.py; the same
script against a real slurmctld in tests/slurm/test_standin_health.py): a node is idle when
sinfo says it runs no job. On both, a node not yet through the verify gate runs no work of the
user's, whatever the gate itself runs on it."""

from __future__ import annotations

from typing import Any

from provisioner.estimate.cost import Instance, NatGateway, Part, Quote, Unpriced
from provisioner.ops.cost_report import (
    CostNow,
    Running,
    busy_nodes,
    gpu_pools,
    kube_idle,
    slurm_share,
    unverified_nodes,
)
from tests.conftest import ROOT


def _node(name: str, instance: str, gpus: str = "8") -> dict[str, Any]:
    capacity = {"cpu": "192", "memory": "2097152Ki", **({"nvidia.com/gpu": gpus} if gpus else {})}
    return {
        "metadata": {"name": name},
        "spec": {"providerID": f"aws:///us-east-1a/{instance}"},
        "status": {"capacity": capacity},
    }


def _pod(
    node: str,
    phase: str,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
) -> dict[str, Any]:
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    return {
        "spec": {"nodeName": node, "containers": [{"name": "main", "resources": resources}]},
        "status": {"phase": phase},
    }


NODES = [
    _node("ip-10-0-1-1", "i-0aaa"),
    _node("ip-10-0-1-2", "i-0bbb"),
    _node("ip-10-0-1-3", "i-0ccc"),
    _node("ip-10-0-9-9", "i-0sys", gpus=""),  # a system node: not a GPU node
]
INSTANCES = {
    "i-0aaa": Running("p5.48xlarge", "OnDemand"),
    "i-0bbb": Running("p5.48xlarge", "OnDemand"),
    "i-0ccc": Running("p5.48xlarge", "Spot"),
    "i-0sys": Running("m7i.2xlarge", "OnDemand"),
}
P5 = Quote(55.04, "AWS Price List")
LINES: tuple[tuple[Part, Quote | Unpriced], ...] = (
    (Part("instances/p5", "2 x p5", Instance("p5.48xlarge", "OnDemand"), 2), P5),
    (Part("instances/p5s", "1 x p5 spot", Instance("p5.48xlarge", "Spot"), 1), Quote(20.0, "x")),
    (Part("instances/m7i", "1 x m7i", Instance("m7i.2xlarge", "OnDemand"), 1), Quote(0.4, "x")),
    (Part("nat-1", "NAT gateway", NatGateway()), Quote(0.045, "x")),
)


def test_a_pod_asking_for_gpus_makes_its_node_busy_by_requests_or_limits() -> None:
    pods = [
        _pod("ip-10-0-1-1", "Running", {"nvidia.com/gpu": "8"}),
        _pod("ip-10-0-1-2", "Pending", limits={"nvidia.com/gpu": "1"}),  # limits only
        _pod("ip-10-0-1-3", "Succeeded", {"nvidia.com/gpu": "8"}),  # finished: holds nothing
        _pod("ip-10-0-1-3", "Running", {"cpu": "1"}),  # no GPU asked (a DaemonSet's pod)
        _pod("ip-10-0-1-3", "Running", {"nvidia.com/gpu": "0"}),
    ]
    assert busy_nodes(pods) == {"ip-10-0-1-1", "ip-10-0-1-2"}


def test_idle_gpu_nodes_are_priced_and_shared_of_the_hour() -> None:
    pods = [_pod("ip-10-0-1-1", "Running", {"nvidia.com/gpu": "8"})]
    idle = kube_idle(NODES, pods, INSTANCES, LINES)
    assert idle.idle == ("ip-10-0-1-2", "ip-10-0-1-3") and idle.nodes == 3
    assert idle.hourly == 55.04 + 20.0  # one on demand, one spot, each at its own rate
    cost = CostNow("c", "us-east-1", LINES, None, idle=idle)
    share = cost.idle_share()
    assert share is not None and abs(share - (75.04 / (110.08 + 20.0 + 0.4 + 0.045))) < 1e-9
    assert cost.as_data()["idle"]["share"] == round(share, 3)


def test_a_node_in_the_verify_gate_is_idle_though_the_gates_job_holds_its_gpus() -> None:
    gated = _node("ip-10-0-1-2", "i-0bbb")
    # The startup taint as a joining node of the managed node group carries it (a Node's
    # spec.taints: key, value, effect); the verify controller takes it off once it passes.
    gated["spec"]["taints"] = [
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        {"key": "fmctl.dev/unverified", "value": "true", "effect": "NoSchedule"},
    ]
    nodes = [NODES[0], gated, NODES[2]]
    assert unverified_nodes(nodes) == {"ip-10-0-1-2"}
    pods = [
        _pod("ip-10-0-1-1", "Running", {"nvidia.com/gpu": "8"}),  # the user's training
        _pod("ip-10-0-1-2", "Running", {"nvidia.com/gpu": "8"}),  # the gate's Job
    ]
    idle = kube_idle(nodes, pods, INSTANCES, LINES)
    assert idle.idle == ("ip-10-0-1-2", "ip-10-0-1-3") and idle.nodes == 3
    assert "verify gate" in idle.note
    # Through the gate (its taint gone), the same pod is the user's work.
    assert kube_idle(NODES[:3], pods, INSTANCES, LINES).idle == ("ip-10-0-1-3",)


def test_an_idle_node_that_cannot_be_priced_leaves_the_share_unknown() -> None:
    lines = (
        (
            Part("instances/p5", "2 x p5", Instance("p5.48xlarge", "OnDemand"), 2),
            Unpriced("no Price List answer"),
        ),
    )
    idle = kube_idle(NODES[:2], [], INSTANCES, lines)
    assert idle.idle == ("ip-10-0-1-1", "ip-10-0-1-2") and idle.hourly is None
    assert CostNow("c", "us-east-1", lines, None, idle=idle).idle_share() is None


#: A ParallelCluster head node's cluster-health.sh answer: partition train on p5 nodes.
SLURM = (ROOT / "tests/data/check/cluster-health-pcluster.txt").read_text()
FLEET = {
    "i-0head": Running("m7i.2xlarge", "OnDemand", "", "parallelcluster"),
    "i-0p51": Running("p5.48xlarge", "OnDemand", "train"),
    "i-0p52": Running("p5.48xlarge", "OnDemand", "train"),
    "i-0cpu": Running("m7i.2xlarge", "OnDemand", "build"),  # a CPU queue: not counted
}


def test_slurm_nodes_that_run_no_job_are_idle_and_priced_by_their_pool() -> None:
    pools = gpu_pools(FLEET)
    assert pools == {"train": ("p5.48xlarge", "OnDemand")}
    idle = slurm_share(SLURM, pools, LINES)
    # train-st-p5-[1-14]: 7 (powered down, being replaced) bills nothing; 6 (draining) and
    # the allocated ones run jobs; idle, drained and not responding ones run none.
    expected = [1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13, 14]
    assert idle.idle == tuple(f"train-st-p5-{n}" for n in expected), idle
    assert idle.nodes == 13  # the login partition is not a GPU pool's
    assert idle.hourly is not None and abs(idle.hourly - 12 * 55.04) < 1e-6
    assert idle.note.startswith("Slurm:")


def test_a_job_makes_a_slurm_node_busy_and_an_unpriced_pool_leaves_the_share_unknown() -> None:
    text = "== nodes\ntrain*|mixed|Unknown|gpu-1|none\ntrain*|allocated|Unknown|gpu-2|none\n"
    text += "train*|idle~|Unknown|gpu-[3-8]|none\ntrain*|idle|Unknown|gpu-9|none\n== held\n"
    pools = {"train": ("p5en.48xlarge", "OnDemand")}
    idle = slurm_share(text, pools, LINES)  # LINES price no p5en
    assert idle.idle == ("gpu-9",) and idle.nodes == 3 and idle.hourly is None
    assert (
        slurm_share(
            text.replace("gpu-9", "gpu-10").replace("idle|", "completing|"), pools, LINES
        ).idle
        == ()
    )


def test_a_slurm_node_held_for_its_verify_pair_is_idle_and_its_peer_busy() -> None:
    # verify-pair.sh reserves the node (fmctl-verify-gpu-1) and an idle peer to root and runs
    # the pair's job on both: sinfo says both allocated; cluster-health.sh lists the node.
    text = "== nodes\ntrain*|allocated|Unknown|gpu-[1-2]|none\ntrain*|idle|Unknown|gpu-3|none\n"
    pools = {"train": ("p5.48xlarge", "OnDemand")}
    assert slurm_share(text + "== held\n== verifying\n", pools, LINES).idle == ("gpu-3",)
    held = slurm_share(text + "== held\n== verifying\ngpu-1\n", pools, LINES)
    assert held.idle == ("gpu-1", "gpu-3") and held.nodes == 3
    assert held.hourly is not None and abs(held.hourly - 2 * 55.04) < 1e-6
    assert "verify gate" in held.note
