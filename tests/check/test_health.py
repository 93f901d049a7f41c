"""`fmctl health`'s reading of what the scheduler holds: Slurm's node groups and reasons
(cluster-health.sh's output; the same script runs against a real slurmctld in
tests/slurm/test_standin_health.py), and Kubernetes' nodes."""

from __future__ import annotations

import dataclasses

import pytest

from provisioner.catalog import load_catalog
from provisioner.catalog.eks_repair import UNVERIFIED_TAINT
from provisioner.catalog.faults import repair_budget
from provisioner.check.health import expand_hostlist, parse_fault, parse_slurm
from provisioner.check.health_gather import (
    KUBE_NO_GATE,
    KUBE_NOTE,
    REPAIR_ANNOTATION,
    VERDICT_ANNOTATION,
    kube_report,
    replacements,
)
from provisioner.render.context import ClusterContext, build_context
from provisioner.render.pools import POOL_LABEL
from tests.conftest import ROOT, validate_text

#: cluster-health.sh on a ParallelCluster head node: sinfo's groups (partition, state, time
#: of the reason, nodes, reason), then the agent's held faults. Written for this test in the
#: format Slurm 24.11 prints (sinfo -o '%P|%T|%H|%N|%E'; tests/data/check/README.md).
SLURM = (ROOT / "tests/data/check/cluster-health-pcluster.txt").read_text()


def _context() -> ClusterContext:
    validation = validate_text((ROOT / "examples/p5-slurm-capacity-block.yaml").read_text())
    assert validation.ok and validation.resolved is not None
    context = build_context(validation.resolved, load_catalog())
    pool = dataclasses.replace(context.pools[0], name="train")
    return dataclasses.replace(context, pools=(pool,))


def test_every_slurm_state_of_the_loop() -> None:
    report = parse_slurm("llm", SLURM, "10%", ("train",))
    nodes = {n.name: n for n in report.nodes}
    assert len(nodes) == 14 and "login-1" not in nodes  # only the GPU pools' nodes
    assert nodes["train-st-p5-1"].state == "healthy" and nodes["train-st-p5-1"].since is None
    repairing = nodes["train-st-p5-5"]
    assert (repairing.state, repairing.since) == ("repairing", "2026-12-04T03:12:09")
    assert repairing.fault is not None
    assert repairing.fault.as_data() == {
        "code": "xid:79",
        "class": "RESTART_BM",
        "action": "replace",
        "detail": "XID 79 RESTART_BM -> replace",
    }
    draining = nodes["train-st-p5-6"]
    assert draining.state == "draining" and draining.fault is not None
    assert (draining.fault.code, draining.fault.detail) == ("efa-count", "31 of 32 EFA devices")
    assert nodes["train-st-p5-7"].state == "repairing"  # clustermgtd replacing it
    theirs = nodes["train-st-p5-8"]
    assert (theirs.state, theirs.detail, theirs.fault) == (
        "drained",
        "ops|cable check, ticket 42",
        None,
    )
    assert nodes["train-st-p5-13"].state == "failed"  # not responding
    # A stale reason on a node back in service is not a fault.
    stale = nodes["train-st-p5-14"]
    assert (stale.state, stale.fault, stale.detail) == ("healthy", None, "idle")
    suspect = nodes["train-st-p5-3"]
    assert suspect.state == "suspect" and suspect.fault is not None
    assert suspect.fault.code == "xid:109" and "budget: 2 of 14" in suspect.detail
    (pool,) = report.pools
    assert pool.as_data() == {"name": "train", "nodes": 14, "inRepair": 2, "budget": 1}
    assert [e.node for e in report.events] == [
        "train-st-p5-6",
        "train-st-p5-5",
        "train-st-p5-7",
        "train-st-p5-8",
    ]
    data = report.as_data()
    assert set(data) == {"cluster", "scheduler", "pools", "nodes", "events", "notes"}
    assert set(data["nodes"][0]) == {"name", "pool", "state", "fault", "since", "detail"}


def test_a_drained_node_waits_for_a_person_only_with_drain_only() -> None:
    """An idle node the agent drained for a new instance is repairing on both Slurm
    providers (ParallelCluster's clustermgtd replaces it; on PCS the agent reboots it into the
    nodeBootstrapped stage that fails for it, tests/engine/test_pcs_agent.py); one drained
    with health.repair drain-only waits for a person, and says so. Both count in the pool's
    repairs, as the agent's own budget counts them."""
    text = SLURM + (
        "== nodes\n"
        "train*|drained|2026-12-04T04:00:00|train-st-p5-15|fmctl-health: NVLINK_DOWN "
        "(GPU 3: 17 of 18 NVLinks up) -> drain\n"
    )
    report = parse_slurm("llm", text, "10%", ("train",))
    nodes = {n.name: n for n in report.nodes}
    assert nodes["train-st-p5-5"].state == "repairing"
    assert nodes["train-st-p5-5"].fault is not None
    assert nodes["train-st-p5-5"].fault.code == "xid:79"
    assert nodes["train-st-p5-15"].state == "drained"
    assert nodes["train-st-p5-15"].detail == (
        "fmctl-health: NVLINK_DOWN (GPU 3: 17 of 18 NVLinks up) -> drain (health.repair "
        "drain-only: out of service until a person acts)"
    )
    assert nodes["train-st-p5-6"].state == "draining"  # its jobs still run
    assert nodes["train-st-p5-8"].detail == "ops|cable check, ticket 42"  # a person's
    # 5, 6 and 15 (not the person's 8): the agent's own count, which its budget holds to.
    assert [p.in_repair for p in report.pools] == [3]


def test_what_up_wait_healthy_counts() -> None:
    """In service and healthy: not a stale reason's node counted twice, not a powered-down
    cloud node (a dynamic pool's, which runs nothing)."""
    from provisioner.ops.check import in_service

    text = SLURM + "== nodes\ntrain*|idle~|Unknown|train-st-p5-[20-21]|none\n"
    report = parse_slurm("llm", text, "10%", ("train",))
    # 1, 2, 4, 9-12 and the stale reason's 14 (3 is suspect; 20-21 are powered down).
    assert in_service(report) == {"train": 8}


def test_hostlists_and_budgets() -> None:
    assert expand_hostlist("a-[1-3,7],b1,c[08-10]d") == [
        "a-1", "a-2", "a-3", "a-7", "b1", "c08d", "c09d", "c10d",
    ]  # fmt: skip
    assert (repair_budget("10%", 3), repair_budget("10%", 40), repair_budget("2", 40)) == (1, 4, 2)
    assert parse_fault("ops: cable check") is None
    assert parse_fault("fmctl-health: verifying") is None


def _node(
    name: str, pool: str, ready: str = "True", fault: str = "", **spec: object
) -> dict[str, object]:
    conditions = [
        {"type": "Ready", "status": ready, "reason": "KubeletNotReady",
         "lastTransitionTime": "2026-12-04T03:00:00Z"},
    ]  # fmt: skip
    if fault:
        # The node monitoring agent's condition (EKS User Guide, "Node health": the reason
        # NvidiaXID[Code]Error under AcceleratedHardwareReady).
        conditions.append(
            {"type": "AcceleratedHardwareReady", "status": "False", "reason": fault,
             "message": "A critical GPU error occurred.",
             "lastTransitionTime": "2026-12-04T03:30:00Z"}
        )  # fmt: skip
    return {
        "metadata": {"name": name, "labels": {POOL_LABEL: pool}},
        "spec": spec,
        "status": {"conditions": conditions},
    }


def test_kubernetes_nodes() -> None:
    nodes = [
        _node("ip-1", "train"),
        _node("ip-2", "train", ready="False"),
        _node("ip-3", "train", unschedulable=True),
        _node("ip-4", "train", unschedulable=True),
        _node("ip-5", "train", taints=[{"key": UNVERIFIED_TAINT, "effect": "NoSchedule"}]),
        _node("ip-6", "system"),
        _node("ip-7", "train", fault="NvidiaXID79Error"),
        _node("ip-8", "train", fault="NvidiaXID48Error", unschedulable=True),
        _node("ip-9", "train", taints=[{"key": UNVERIFIED_TAINT, "effect": "NoSchedule"}]),
    ]
    # fmctl's verify controller recorded that ip-9 failed the gate: kept out of service.
    nodes[-1]["metadata"]["annotations"] = {
        VERDICT_ANNOTATION: "failed 2026-12-04T03:40:00Z: FAIL gpus: 7 of 8"
    }
    pods = [
        {"metadata": {"name": "job-0"}, "spec": {"nodeName": "ip-3"},
         "status": {"phase": "Running"}},
        {"metadata": {"name": "dcgm", "ownerReferences": [{"kind": "DaemonSet"}]},
         "spec": {"nodeName": "ip-4"}, "status": {"phase": "Running"}},
    ]  # fmt: skip
    report = kube_report(_context(), nodes, pods)
    states = {n.name: n.state for n in report.nodes}
    assert states == {
        "ip-1": "healthy",
        "ip-2": "failed",
        "ip-3": "draining",
        "ip-4": "drained",
        "ip-5": "verifying",
        "ip-7": "suspect",  # EKS waits (a minute, by fmctl's override) before it repairs
        "ip-8": "repairing",  # cordoned by node auto repair
        "ip-9": "failed",
    }
    faults = {n.name: n.fault for n in report.nodes if n.fault}
    assert set(faults) == {"ip-7", "ip-8", "ip-9"}
    assert faults["ip-9"].fault_class == "VERIFY_FAILED"
    assert faults["ip-9"].detail.endswith("FAIL gpus: 7 of 8")
    # The XID's class and action are fmctl's fault table's (NVIDIA's catalog).
    assert (faults["ip-7"].code, faults["ip-7"].fault_class) == ("xid:79", "RESTART_BM")
    assert (faults["ip-8"].code, faults["ip-8"].action) == ("xid:48", "replace")
    # The action is what EKS will do under health.repair (fmctl's overrides): Xid 79 is
    # RESTART_BM, replaced under the default, rebooted under reboot.
    assert faults["ip-7"].action == "replace"
    rebooting = kube_report(dataclasses.replace(_context(), health_repair="reboot"), nodes, pods)
    assert {n.name: n.fault.action for n in rebooting.nodes if n.fault}["ip-7"] == "reboot"
    # Recent events, newest first: the gate's verdict and the failing conditions, each at
    # its own time.
    assert [(e.time, e.node, e.what) for e in report.events] == [
        ("2026-12-04T03:40:00Z", "ip-9", "failed the verify gate: FAIL gpus: 7 of 8"),
        ("2026-12-04T03:30:00Z", "ip-7", "AcceleratedHardwareReady False: NvidiaXID79Error"),
        ("2026-12-04T03:30:00Z", "ip-8", "AcceleratedHardwareReady False: NvidiaXID48Error"),
    ]
    assert report.notes == (KUBE_NOTE, KUBE_NO_GATE)
    gated = dataclasses.replace(_context(), health_verify_kubernetes_gate=True)
    assert kube_report(gated, nodes, pods).notes == (KUBE_NOTE,)
    assert report.pools[0].as_data() == {"name": "train", "nodes": 8, "inRepair": 1, "budget": 1}


def test_a_node_that_failed_the_gate_is_repairing_once_its_replacement_is_asked() -> None:
    """The verify controller's note on a node that failed (verify_controller.py): replacing
    (its instance terminated: ``repairing``, counted in the pool's repairs) or held (still
    ``failed``, with why); each an event at its time."""
    tainted = [{"key": UNVERIFIED_TAINT, "effect": "NoSchedule"}]
    verdict = "failed 2026-12-04T03:40:00Z: FAIL gpus: 7 of 8"
    going, held = _node("ip-1", "train", taints=tainted), _node("ip-2", "train", taints=tainted)
    going["metadata"]["annotations"] = {
        VERDICT_ANNOTATION: verdict,
        REPAIR_ANNOTATION: "replacing 2026-12-04T03:41:00Z: instance i-1 terminated; its node "
        "group launches a replacement",
    }
    held["metadata"]["annotations"] = {
        VERDICT_ANNOTATION: verdict,
        REPAIR_ANNOTATION: "held 2026-12-04T03:41:00Z: the repair budget of pool train is in "
        "use (1: health.maxInRepair)",
    }
    report = kube_report(_context(), [going, held], [])
    nodes = {n.name: n for n in report.nodes}
    assert (nodes["ip-1"].state, nodes["ip-2"].state) == ("repairing", "failed")
    assert nodes["ip-1"].fault is not None and nodes["ip-1"].fault.action == "replace"
    assert "held 2026-12-04T03:41:00Z: the repair budget" in nodes["ip-2"].detail
    assert report.pools[0].as_data()["inRepair"] == 1
    assert (
        "2026-12-04T03:41:00Z",
        "ip-1",
        "replacing: instance i-1 terminated; its node group launches a replacement",
    ) in [(e.time, e.node, e.what) for e in report.events]


def test_replacements_under_way_count_in_the_pools_repairs() -> None:
    """The node being replaced is gone from the API; the verify controller counts it until
    its replacement is verified (its ConfigMap, fmctl-verify-repairs): `fmctl health`
    shows the pool's budget in use from that count."""
    kept = {"data": {"state": '{"failedInARow": {"train": 0}, "pending": {"train": [1.0]}}'}}
    report = kube_report(_context(), [_node("ip-1", "train")], [], kept)
    assert report.pools[0].as_data() == {"name": "train", "nodes": 1, "inRepair": 1, "budget": 1}
    assert kube_report(_context(), [_node("ip-1", "train")], [], None).pools[0].in_repair == 0
    # What the controller wrote and fmctl cannot read is no count, not an error.
    assert replacements({"data": {"state": "not json"}}) == {}
    assert replacements({"data": {"state": '{"pending": []}'}}) == {}


def test_the_text_shows_counts_and_only_the_nodes_to_look_at(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from provisioner.cli.health_cmd import _print

    _print(parse_slurm("llm", SLURM, "10%", ("train",)))
    out = capsys.readouterr().out
    assert "pool train: 14 nodes (1 drained, 1 draining, 1 failed, 8 healthy, 2 repairing, " in out
    assert "train-st-p5-1 " not in out  # healthy: in -o json only
    lines = [line.split()[0] for line in out.splitlines()[2:] if line.startswith("  train-")]
    # Problems in node order, 13 after 8 (not after 1).
    assert lines == [f"train-st-p5-{n}" for n in (3, 5, 6, 7, 8, 13)], lines
    assert "idle*: not responding to slurmctld" in out


def test_a_node_held_for_its_nccl_pair_is_verifying() -> None:
    """cluster-health.sh's "verifying" section names the nodes the verify gate reserved for
    their 2-node NCCL pair (fmctl-verify-NODE; the script runs against a real slurmctld in
    tests/slurm/test_standin_verify_pair.py); sinfo shows them "reserved", no reason."""
    text = (
        "== nodes\n"
        "train*|idle|Unknown|train-st-p5-[1-2]|none\n"
        "train*|reserved|Unknown|train-st-p5-3|none\n"
        "== held\n"
        "== verifying\n"
        "train-st-p5-3\n"
    )
    nodes = {n.name: n for n in parse_slurm("llm", text, "10%", ("train",)).nodes}
    held = nodes["train-st-p5-3"]
    assert held.state == "verifying" and held.fault is None
    assert held.detail == "fmctl-health: held for its 2-node NCCL pair (fmctl-verify-train-st-p5-3)"
    assert nodes["train-st-p5-1"].state == "healthy"
    # Without the section (an older script's output), a reserved node is in service.
    old = text.split("== verifying")[0]
    assert {n.name: n.state for n in parse_slurm("llm", old, "10%", ("train",)).nodes}[
        "train-st-p5-3"
    ] == "healthy"


def test_what_fmctls_agent_found_on_eks() -> None:
    """fmctl's node agent (health.kubernetesAgent) reports a fault in FmctlHealthy; the
    verify controller holds the node (the budget: ``suspect``), takes it out of service
    (its taint: ``draining`` while a GPU pod runs, else ``repairing``) or has it replaced
    (``repairing``). The fault's code and class are the table's; its action a replacement."""
    message = "fmctl-health: XID 145 WORKFLOW_NVLINK5_ERR -> replace; jobs: finish"
    gone = "fmctl-health: GPU_MISSING (7 of 8 GPUs) -> replace; jobs: requeue"
    out = [{"key": "fmctl.dev/unhealthy", "effect": "NoSchedule"}]
    nodes = [
        _node("ip-1", "train"),
        _node("ip-2", "train"),
        _node("ip-3", "train", taints=out),
        _node("ip-4", "train", taints=out),
        _node("ip-5", "train", taints=out),
        _node("ip-6", "train"),
        _node("ip-7", "train"),
    ]
    nodes[6]["status"]["conditions"].append(  # type: ignore[index]
        {"type": "FmctlHealthy", "status": "Unknown", "reason": "Unchecked",
         "message": "nvidia-smi is not in the container"}
    )  # fmt: skip
    notes = {
        "ip-2": "held 2026-12-04T03:41:00Z: " + message + " (held: the repair budget ...)",
        "ip-3": "draining 2026-12-04T03:40:00Z: " + message,
        "ip-4": "draining 2026-12-04T03:40:00Z: " + gone,
        "ip-5": "replacing 2026-12-04T03:42:00Z: " + message + "; instance i-5 terminated",
    }
    nodes[0]["status"]["conditions"].append(  # type: ignore[index]
        {"type": "FmctlHealthy", "status": "True", "reason": "NoFault"}
    )
    for node in nodes[1:5]:
        name = str(node["metadata"]["name"])  # type: ignore[index]
        node["metadata"]["annotations"] = {REPAIR_ANNOTATION: notes[name]}  # type: ignore[index]
        node["status"]["conditions"].append(  # type: ignore[index]
            {"type": "FmctlHealthy", "status": "False", "reason": "WORKFLOW_NVLINK5_ERR",
             "message": gone if name == "ip-4" else message,
             "lastTransitionTime": "2026-12-04T03:39:00Z"}
        )  # fmt: skip
    nodes[3]["status"]["conditions"][-1]["reason"] = "GPU_MISSING"  # type: ignore[index]
    pods = [{"metadata": {"name": "job-0"}, "spec": {"nodeName": "ip-3"},
             "status": {"phase": "Running"}}]  # fmt: skip
    agent = dataclasses.replace(_context(), health_kubernetes_agent=True)
    report = kube_report(agent, nodes, pods)
    states = {n.name: n.state for n in report.nodes}
    assert states == {
        "ip-1": "healthy",
        "ip-2": "suspect",
        "ip-3": "draining",
        "ip-4": "repairing",
        "ip-5": "repairing",
        "ip-6": "verifying",  # the agent has not reported on it yet
        "ip-7": "healthy",  # nothing found, but it says it could not look
    }
    (unchecked,) = [n for n in report.nodes if n.name == "ip-7"]
    assert unchecked.detail == (
        "Ready; fmctl's node agent cannot look: nvidia-smi is not in the container"
    )
    faults = {n.name: n.fault for n in report.nodes if n.fault}
    assert (faults["ip-3"].code, faults["ip-3"].fault_class) == ("xid:145", "WORKFLOW_NVLINK5_ERR")
    assert (faults["ip-4"].code, faults["ip-4"].fault_class) == ("gpu-count", "GPU_MISSING")
    assert {f.action for f in faults.values()} == {"replace"}
    said = [(e.node, e.what.split(":")[0]) for e in report.events]
    assert ("ip-3", "FmctlHealthy False") in said and ("ip-3", "draining") in said
    assert ("ip-2", "held") in said and ("ip-5", "replacing") in said
    assert "fmctl's node agent" in report.notes[0]
    # In repair: the two taken out (one still draining) and the one being replaced.
    assert report.pools[0].in_repair == 3
