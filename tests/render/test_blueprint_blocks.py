"""What `plan` builds for a Capacity Block pool's end: on ParallelCluster (the p5 example,
whose pool is on a block) and PCS, the T-60 schedule group and the T-40 rule, both naming
the controller host's maker and a role that may send Run Command only to the cluster's own
instances; on EKS the T-60 schedules only (EKS scales the block's node group to zero itself at
T-40), as a role that may update only that node group and send Run Command only to the
cluster's own instances (none of that with checkpointSignal none)."""

from __future__ import annotations

import json
from pathlib import Path

from provisioner.blueprint import Where, build
from provisioner.catalog import load_catalog
from provisioner.drivers import yamlio
from provisioner.resources.base import Planned
from provisioner.resources.block_ends import Block
from provisioner.resources.iam import ACCOUNT
from tests.conftest import ROOT, validate_text

WHERE = Where(Path("/nonexistent"), Path("/nonexistent/kubeconfig"))


def _items(text: str) -> dict[str, Planned]:
    validation = validate_text(text)
    assert validation.ok and validation.resolved is not None, validation.problems
    return {i.id: i for i in build(validation.resolved, load_catalog(), WHERE)}


def test_parallelcluster_block_pool_gets_both_triggers() -> None:
    items = _items((ROOT / "examples/p5-slurm-capacity-block.yaml").read_text())
    schedule = items["blocks/schedule"].params
    assert schedule.provider == "parallelcluster" and schedule.host.target == "parallelcluster"
    assert schedule.group_name == "fmctl-llm-pretrain-blocks"
    assert schedule.blocks == (Block("train", "cr-0123456789abcdef0", "USR1"),)
    warning = items["blocks/warning/train"]
    assert warning.params.group_name == "fmctl-llm-pretrain-0123456789abcdef0"
    assert warning.origins["pattern"] == "compute.gpuPools[0].capacity.reservationId"
    role = items["iam/block-end"].params
    trust = json.loads(role.trust)["Statement"][0]
    assert sorted(trust["Principal"]["Service"]) == [
        "events.amazonaws.com",
        "scheduler.amazonaws.com",
    ]
    # Only this cluster's schedule group and the block's rule may have it assumed, in the
    # caller's account (filled in when the role is made: ACCOUNT).
    assert trust["Condition"] == {
        "StringEquals": {"aws:SourceAccount": ACCOUNT},
        "ArnLike": {
            "aws:SourceArn": [
                f"arn:aws:scheduler:us-east-1:{ACCOUNT}:schedule-group/fmctl-llm-pretrain-blocks",
                f"arn:aws:events:us-east-1:{ACCOUNT}:rule/fmctl-llm-pretrain-0123456789abcdef0",
            ]
        },
    }
    statements = json.loads(role.inline)["Statement"]
    assert {a for s in statements for a in s["Action"]} == {"ssm:SendCommand"}
    host = next(s for s in statements if s["Sid"] == "ClusterHost")
    assert host["Condition"] == {
        "StringEquals": {"ssm:resourceTag/fmctl.dev/cluster": "llm-pretrain"}
    }


def test_a_validated_only_parallelcluster_has_no_host_to_name() -> None:
    """The sandbox with ParallelCluster validates the cluster and runs no head node: the
    triggers that would run on it are left out, and the plan says so."""
    validation = validate_text((ROOT / "examples/p5-slurm-capacity-block.yaml").read_text())
    assert validation.resolved is not None
    where = Where(Path("/nonexistent"), Path("/nonexistent/kubeconfig"), validate_only=True)
    plan = build(validation.resolved, load_catalog(), where)
    assert "parallelcluster" in plan and not [r for r in plan.ids if r.startswith("blocks/")]
    assert any("runs no head node" in note for note in plan.notes)


def test_pcs_names_the_login_node_group_and_a_spec_signal() -> None:
    text = (ROOT / "examples/p5-slurm-capacity-block.yaml").read_text()
    text = text.replace(
        "slurm: {os: alinux2023, topologyAware: true}",
        "slurm: {provider: pcs, topologyAware: false}",
    )
    text = text.replace(
        "reservationId: cr-0123456789abcdef0}",
        "reservationId: cr-0123456789abcdef0, checkpointSignal: USR2}",
    )
    assert "provider: pcs" in text and "USR2" in text
    items = _items(text)
    schedule = items["blocks/schedule"].params
    assert schedule.provider == "pcs" and schedule.host.target == "pcs/node-group/login"
    assert schedule.blocks[0].signal == "USR2"


def test_eks_plans_the_t60_schedules_only_and_pools_off_blocks_plan_nothing() -> None:
    text = (ROOT / "examples/p6-b300-eks-capacity-block.yaml").read_text()
    eks = _items(text)
    assert not [rid for rid in eks if rid.startswith("blocks/warning/")]
    schedule = eks["blocks/schedule"].params
    assert schedule.provider == "eks" and schedule.host.target == "nodegroup/b300"
    assert [b.nodegroup for b in schedule.blocks] == ["b300"]
    assert [b.signal for b in schedule.blocks] == ["USR1"]  # the default, as on Slurm
    # Every block's node group is made first: its Auto Scaling group names the nodes.
    assert [r.target for r in schedule.nodegroups] == ["nodegroup/b300"]
    role = eks["iam/block-end"].params
    trust = json.loads(role.trust)["Statement"][0]
    assert trust["Principal"]["Service"] == "scheduler.amazonaws.com"
    assert trust["Condition"]["ArnLike"] == {
        "aws:SourceArn": [
            f"arn:aws:scheduler:us-east-1:{ACCOUNT}:schedule-group/fmctl-b300-eval-blocks"
        ]
    }
    groups, document, instances = json.loads(role.inline)["Statement"]
    assert groups["Action"] == ["eks:UpdateNodegroupConfig"]
    assert groups["Resource"] == ["arn:aws:eks:us-east-1:*:nodegroup/b300-eval/b300/*"]
    assert document["Resource"] == ["arn:aws:ssm:us-east-1::document/AWS-RunShellScript"]
    assert instances["Action"] == ["ssm:SendCommand"]
    assert instances["Condition"] == {
        "StringEquals": {"ssm:resourceTag/fmctl.dev/cluster": "b300-eval"}
    }
    # checkpointSignal none: the taint alone, and a role that may send no command.
    quiet = _items(text.replace("reservationId: cr-", "checkpointSignal: none, reservationId: cr-"))
    assert [b.signal for b in quiet["blocks/schedule"].params.blocks] == ["none"]
    (only,) = json.loads(quiet["iam/block-end"].params.inline)["Statement"]
    assert only["Action"] == ["eks:UpdateNodegroupConfig"]
    slurm = _items((ROOT / "examples/p6-b200-slurm-existing-fsx.yaml").read_text())
    assert not [rid for rid in slurm if rid.startswith(("blocks/", "iam/block-end"))]


def test_node_agents_tolerate_the_block_taint_and_work_does_not() -> None:
    """Once the T-60 taint is on a block's nodes, a restarted node agent (device plugins,
    exporters, NVIDIA's DRA kubelet plugin) must land there again, or the node stops
    advertising its GPUs and EFA devices for its last hour; the NCCL test and `fmctl check`'s
    jobs are work, which the taint keeps off."""

    from provisioner.render import render
    from provisioner.resources.block_ends import BLOCK_TAINT

    validation = validate_text((ROOT / "examples/p6-b300-eks-capacity-block.yaml").read_text())
    assert validation.resolved is not None
    files = render(validation.resolved, load_catalog()).files

    def tolerated(path: str) -> dict[str, bool]:
        out = {}
        for doc in yamlio.load_all(files[path]):
            if not doc or doc["kind"] not in ("DaemonSet", "Job"):
                continue
            pod = doc["spec"]["template"]["spec"]
            keys = {t.get("key") for t in pod.get("tolerations") or []}
            out[doc["metadata"]["name"]] = BLOCK_TAINT in keys
        return out

    agents = [
        "kubernetes/nvidia-device-plugin/daemonset.yaml",
        "kubernetes/efa-device-plugin/daemonset.yaml",
        "kubernetes/dcgm-exporter/daemonset.yaml",
        "kubernetes/efa-exporter/daemonset.yaml",
    ]
    for path in agents:
        found = tolerated(path)
        assert found and all(found.values()), (path, found)
    work = tolerated("kubernetes/nccl-test/job.yaml")
    assert work and not any(work.values()), work
    from provisioner.render.queueing import dra_values

    plugin = dra_values("1.34", ("gb200",))["kubeletPlugin"]
    assert BLOCK_TAINT in {t["key"] for t in plugin["tolerations"]}
