"""Capacity Blocks that end cleanly on Slurm (``resources.block_ends``): for every pool on a
Capacity Block of a ParallelCluster or PCS cluster, a schedule at T-60 minutes and a rule
on EC2's T-40 warning, both running ``slurm/lib/block-end.sh`` on the controller host
through Run Command, as a role allowed only that.

On EKS only the T-60 schedules are planned: one taints the block's node group so that no new
pod lands there, the other has Run Command signal the processes on its nodes' GPUs to
checkpoint (unless the pool's checkpointSignal is none), as a role allowed only those calls,
on those node groups and this cluster's instances: EKS itself scales a Capacity Block's
managed node group to zero 40 minutes before the block ends (its scheduled action "Amazon
EKS Node Group Capacity Scaledown Before Reservation End": the EKS User Guide, "Create a
managed node group with Capacity Blocks for ML"), draining its pods before EC2 ends the
instances.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from provisioner.blueprint.infra import Parts, rule_source, schedule_group_source
from provisioner.blueprint.model import Where
from provisioner.graph.ref import Ref
from provisioner.render.pcs import LOGIN
from provisioner.resources.block_ends import (
    Block,
    BlockEndParams,
    BlockSchedule,
    BlockWarning,
    group_name,
    rule_name,
)
from provisioner.resources.eks_nodegroup_model import NodegroupOut
from provisioner.resources.iam import RoleOut
from provisioner.resources.parallelcluster import PclusterOut
from provisioner.resources.pcs import NodeGroupOut
from provisioner.spec.tags import OWNER_TAG

ROLE, SCHEDULE = "iam/block-end", "blocks/schedule"


def _run_command(p: Parts) -> list[dict[str, Any]]:
    """Run Command of AWS-RunShellScript on this cluster's instances only (the instance's
    tag, as the condition key ``ssm:resourceTag/KEY`` gives it to SendCommand)."""
    region = p.c.region
    return [
        {
            "Sid": "RunShellScript",
            "Effect": "Allow",
            "Action": ["ssm:SendCommand"],
            "Resource": [f"arn:aws:ssm:{region}::document/AWS-RunShellScript"],
        },
        {
            "Sid": "ClusterHost",
            "Effect": "Allow",
            "Action": ["ssm:SendCommand"],
            "Resource": [f"arn:aws:ec2:{region}:*:instance/*"],
            "Condition": {"StringEquals": {f"ssm:resourceTag/{OWNER_TAG}": p.c.name}},
        },
    ]


def _policy(p: Parts) -> dict[str, Any]:
    """The Slurm role's: Run Command on the cluster's instances."""
    return {"Version": "2012-10-17", "Statement": _run_command(p)}


def _eks(p: Parts, found: list[tuple[int, Block]]) -> None:
    """The T-60 taints of an EKS cluster's block node groups, and their GPU processes
    signalled (the nodes carry the cluster's tag: their launch template's)."""
    blocks = []
    for _, block in found:
        planned = next(i for i in p.items if i.id == f"nodegroup/{block.pool}")
        blocks.append(dataclasses.replace(block, nodegroup=planned.params.nodegroup_name))
    groups = [f"arn:aws:eks:{p.c.region}:*:nodegroup/{p.c.name}/{b.nodegroup}/*" for b in blocks]
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "BlockNodeGroups",
                "Effect": "Allow",
                "Action": ["eks:UpdateNodegroupConfig"],
                "Resource": groups,
            },
            *(_run_command(p) if any(b.signal != "none" for b in blocks) else []),
        ],
    }
    p.role(
        ROLE,
        "block-taint",
        inline=policy,
        sources=(schedule_group_source(p, group_name(p.c.name)),),
    )
    host = p.ref(f"nodegroup/{blocks[0].pool}", NodegroupOut)
    params = BlockEndParams(
        group_name(p.c.name),
        p.ref(ROLE, RoleOut),
        tuple(blocks),
        "eks",
        host,
        p.tags(SCHEDULE),
        tuple(p.ref(f"nodegroup/{b.pool}", NodegroupOut) for b in blocks),
    )
    p.add(SCHEDULE, BlockSchedule, params, schedules="compute.gpuPools")


def blocks(p: Parts, where: Where) -> list[str]:
    """Plan the triggers for each Capacity Block pool: both on Slurm, the taint on EKS; what
    the plan must say of them (none, or why they are left out)."""
    found = [
        (i, Block(pool.name, pool.capacity.reservation_id, pool.capacity.checkpoint_signal))
        for i, pool in enumerate(p.spec.compute.gpu_pools)
        if pool.capacity.type == "capacity-block" and pool.capacity.reservation_id
    ]
    if not found:
        return []
    if p.spec.scheduler != "slurm":
        if p.has("eks"):
            _eks(p, found)
        return []
    host: Ref[NodeGroupOut] | Ref[PclusterOut]
    if p.has("pcs/cluster"):
        provider, host = "pcs", p.ref(f"pcs/node-group/{LOGIN}", NodeGroupOut)
    elif p.has("parallelcluster") and not where.validate_only:
        provider, host = "parallelcluster", p.ref("parallelcluster", PclusterOut)
    elif p.has("parallelcluster"):
        return [
            "the sandbox validates the ParallelCluster cluster and runs no head node: the "
            "Capacity Blocks' T-60 schedule and T-40 rule, which run on it, are left out"
        ]
    else:
        return []  # no Slurm cluster planned here (the sandbox without ParallelCluster)
    sources = (
        schedule_group_source(p, group_name(p.c.name)),
        *(rule_source(p, rule_name(p.c.name, b.reservation_id)) for _, b in found),
    )
    p.role(ROLE, "block-end", inline=_policy(p), sources=sources)
    role = p.ref(ROLE, RoleOut)
    every = tuple(block for _, block in found)
    p.add(
        SCHEDULE,
        BlockSchedule,
        BlockEndParams(group_name(p.c.name), role, every, provider, host, p.tags(SCHEDULE)),
        schedules="compute.gpuPools",
    )
    for index, block in found:
        rid = f"blocks/warning/{block.pool}"
        at = f"compute.gpuPools[{index}].capacity"
        p.add(
            rid,
            BlockWarning,
            BlockEndParams(
                rule_name(p.c.name, block.reservation_id),
                role,
                (block,),
                provider,
                host,
                p.tags(rid),
            ),
            pattern=f"{at}.reservationId",
            target=at,
        )
    return []
