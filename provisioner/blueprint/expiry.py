"""The ttl, kept by AWS: with ``metadata.ttl``, a schedule group whose schedules scale every
node group to zero at the cluster's expiry (``resources.schedules``), and the role they run
as, allowed exactly those calls on this cluster's node groups.

What each scheduler is stopped with:

- EKS: ``eks:UpdateNodegroupConfig`` to a size of 0 (min and desired; max stays, it must be
  at least 1: the EKS API's NodegroupScalingConfig).
- PCS: ``pcs:UpdateComputeNodeGroup`` to 0 instances at least and at most (the PCS API allows
  0 for both: botocore's ScalingConfigurationRequest).
- ParallelCluster: ``dynamodb:UpdateItem`` of the fleet's status in the cluster's table
  (``parallelcluster-NAME``, item ``COMPUTE_FLEET``, ``Data.status`` to STOP_REQUESTED and
  ``Data.lastStatusUpdatedTime``), as `pcluster update-compute-fleet` writes it
  (aws-parallelcluster, cli/src/pcluster/models/compute_fleet_status_manager.py,
  JsonComputeFleetStatusManager at 451cc532); the head node stops the fleet from there.
"""

from __future__ import annotations

from typing import Any

from provisioner.blueprint.infra import Parts, schedule_group_source
from provisioner.resources.iam import RoleOut
from provisioner.resources.pcs import NodeGroupOut, PcsClusterOut
from provisioner.resources.schedules import Expiry, ExpiryParams, StopCall, group_name, input_of

ROLE = "iam/ttl-scheduler"
RID = "expiry"
#: EventBridge Scheduler's placeholder for the time a schedule was due (its context
#: attributes, usable in a target's Input).
SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"


def _eks(p: Parts) -> tuple[list[StopCall], list[Any]]:
    calls, arns = [], []
    for item in p.items:
        if item.kind != "eks-nodegroup":
            continue
        name = item.params.nodegroup_name
        document = {
            "clusterName": p.c.name,
            "nodegroupName": name,
            "scalingConfig": {"minSize": 0, "desiredSize": 0},
        }
        calls.append(StopCall(_schedule(item.id), "eks:updateNodegroupConfig", input_of(document)))
        arns.append(f"arn:aws:eks:{p.c.region}:*:nodegroup/{p.c.name}/{name}/*")
    return calls, [_statement("NodeGroups", ["eks:UpdateNodegroupConfig"], arns)] if arns else []


def _pcs(p: Parts) -> tuple[list[StopCall], list[Any]]:
    calls = []
    for item in p.items:
        if item.kind != "pcs-node-group":
            continue
        document = {
            "clusterIdentifier": "{cluster}",
            "computeNodeGroupIdentifier": "{group}",
            "scalingConfiguration": {"minInstanceCount": 0, "maxInstanceCount": 0},
        }
        calls.append(
            StopCall(
                _schedule(item.id),
                "pcs:updateComputeNodeGroup",
                input_of(document),
                cluster=p.ref("pcs/cluster", PcsClusterOut),
                group=p.ref(item.id, NodeGroupOut),
            )
        )
    # The node groups' ids are PCS's, known once made: the role names the region's compute
    # node groups, and the one action.
    arn = f"arn:aws:pcs:{p.c.region}:*:computenodegroup/*"
    return calls, [_statement("NodeGroups", ["pcs:UpdateComputeNodeGroup"], [arn])]


def _parallelcluster(p: Parts) -> tuple[list[StopCall], list[Any]]:
    table = f"parallelcluster-{p.c.name}"
    document = {
        "TableName": table,
        "Key": {"Id": {"S": "COMPUTE_FLEET"}},
        "UpdateExpression": "SET #dt.#st = :s, #dt.#lut = :t",
        "ExpressionAttributeNames": {
            "#dt": "Data",
            "#st": "status",
            "#lut": "lastStatusUpdatedTime",
        },
        "ExpressionAttributeValues": {":s": {"S": "STOP_REQUESTED"}, ":t": {"S": SCHEDULED_TIME}},
    }
    call = StopCall("compute-fleet", "dynamodb:updateItem", input_of(document))
    arn = f"arn:aws:dynamodb:{p.c.region}:*:table/{table}"
    return [call], [_statement("ComputeFleet", ["dynamodb:UpdateItem"], [arn])]


def _schedule(rid: str) -> str:
    """A schedule's name from its node group's logical id (pcs/node-group/gpu -> gpu)."""
    return rid.rsplit("/", 1)[-1]


def _statement(sid: str, actions: list[str], resources: list[str]) -> Any:
    return {"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": resources}


def stop_calls(p: Parts) -> tuple[list[StopCall], list[Any]]:
    """The calls that bring every node group of the planned cluster to zero, and the IAM
    statements that allow exactly them (used by the ttl's schedules and the budget's stop
    function alike)."""
    if p.has("pcs/cluster"):
        return _pcs(p)
    if p.has("parallelcluster"):
        return _parallelcluster(p)
    return _eks(p)


def expiry(p: Parts) -> None:
    """Plan the ttl's schedules, when the spec has a ttl and there is something to stop."""
    if not p.spec.metadata.ttl:
        return
    calls, statements = stop_calls(p)
    if not calls:
        return
    p.role(
        ROLE,
        "ttl-scheduler",
        inline={"Version": "2012-10-17", "Statement": statements},
        sources=(schedule_group_source(p, group_name(p.c.name)),),
    )
    p.add(
        RID,
        Expiry,
        ExpiryParams(group_name(p.c.name), p.ref(ROLE, RoleOut), tuple(calls), p.tags(RID)),
        at="metadata.ttl",
    )
