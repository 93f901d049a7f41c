"""The sandbox's Auto Scaling group of a managed node group replacing an instance it was told
to terminate (``TerminateInstanceInAutoScalingGroup`` without the decrement; the EC2 Auto
Scaling API reference: the group launches a new instance in its place): the old node leaves
at once, the new instance is ``Pending`` in the group and its node joins only after it has
booted, as SetDesiredCapacity's instances do. Run on the sandbox's own EKS and Kubernetes
state (``fmctl_sandbox.eks.Eks``, ``KubeServer``), with the clock the test moves."""

from __future__ import annotations

import time

from fmctl_sandbox import eks_asg
from fmctl_sandbox.eks import Eks
from fmctl_sandbox.eks_model import Item, node_slots
from fmctl_sandbox.kube import KubeServer

SCALE = 0.001
ENDPOINT = "E1"


def eks_world() -> tuple[Eks, dict[str, object]]:
    """The sandbox's EKS state with an ACTIVE two-node p5en group whose nodes have joined."""
    kube = KubeServer()
    kube.ensure(ENDPOINT, "c")
    eks = Eks(SCALE, kube)
    eks.endpoints[("r", "c")] = ENDPOINT
    ng: dict[str, object] = {
        "clusterName": "c",
        "nodegroupName": "gpu",
        "status": "ACTIVE",
        "instanceTypes": ["p5en.48xlarge"],
        "scalingConfig": {"minSize": 2, "maxSize": 2, "desiredSize": 2},
        "labels": {},
        "taints": [],
        "resources": {"autoScalingGroups": [{"name": "eks-gpu-0a1b2c3d"}]},
    }
    eks.nodegroups[("r", "c", "gpu")] = Item(ng, 0.0)
    eks.sync_nodes("r", ng)
    return eks, ng


def _node_instances(eks: Eks) -> set[str]:
    return {
        str(n["spec"]["providerID"]).rsplit("/", 1)[-1] for n in eks.kube.nodes(ENDPOINT, "gpu")
    }


def test_a_replacement_joins_after_it_boots() -> None:
    eks, ng = eks_world()
    first, second = (i for _, i in node_slots("r", ng))
    assert _node_instances(eks) == {first, second}
    code, group = eks_asg.terminate(eks, "r", first, decrement=False)
    assert code == "" and group
    # The old node is gone; the group has launched a new instance, which has not joined.
    (_, launched) = next(s for s in node_slots("r", ng) if s[1] not in (first, second))
    assert _node_instances(eks) == {second}
    assert list(eks_asg.booting(eks.nodegroups[("r", "c", "gpu")])) == [launched]
    described = eks_asg._group("r", group, eks.nodegroups[("r", "c", "gpu")])
    assert f"<InstanceId>{launched}</InstanceId>" in described
    assert "<LifecycleState>Pending</LifecycleState>" in described
    # A moment later it is still booting; once the boot's time has passed it joins.
    eks_asg.join_booted(eks, time.monotonic())
    assert _node_instances(eks) == {second}
    eks_asg.join_booted(eks, time.monotonic() + eks_asg.BOOT_SECONDS * SCALE + 0.01)
    assert _node_instances(eks) == {second, launched}
    assert eks_asg.booting(eks.nodegroups[("r", "c", "gpu")]) == {}
    described = eks_asg._group("r", group, eks.nodegroups[("r", "c", "gpu")])
    assert "Pending" not in described


def test_a_decremented_termination_launches_nothing() -> None:
    eks, ng = eks_world()
    ng["scalingConfig"] = {"minSize": 1, "maxSize": 2, "desiredSize": 2}
    first, second = (i for _, i in node_slots("r", ng))
    assert eks_asg.terminate(eks, "r", first, decrement=True)[0] == ""
    assert _node_instances(eks) == {second}
    assert eks_asg.booting(eks.nodegroups[("r", "c", "gpu")]) == {}
    assert [i for _, i in node_slots("r", ng)] == [second]
