"""The ParallelCluster cluster as a node of the plan, on the infrastructure fmctl made.

Its config is rendered with the real ids of what the engine created: subnets, the EFA
security group, placement groups by name, the artifact bucket, and the FSx file system by
FileSystemId (so the file system's life is fmctl's and it outlives the cluster). Delete goes
through ParallelCluster, then terminates compute instances Slurm launched outside
CloudFormation that still carry the cluster's tag.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

from provisioner.drivers.pcluster import ParallelCluster, PclusterError, failure_text
from provisioner.plan.context import Engine
from provisioner.plan.graph import Found, Node, Outputs
from provisioner.render.context import ClusterContext
from provisioner.render.placeholders import fill

#: Tag ParallelCluster puts on every instance it or Slurm launches.
PCLUSTER_TAG = "parallelcluster:cluster-name"


def real_config(c: ClusterContext, engine: Engine) -> str:
    """The ParallelCluster config of ``c`` with every placeholder filled from the engine."""
    from provisioner.render.slurm import render_slurm

    out = engine.outputs
    if c.fsx is not None and "fsx" in out:
        c = dataclasses.replace(c, fsx=dataclasses.replace(c.fsx, existing_id=out["fsx"]["id"]))
    values = {
        "privateSubnetId": out["subnet/private"]["id"],
        "publicSubnetId": out.get("subnet/public", out["subnet/private"])["id"],
        "efaSecurityGroupId": out["sg/efa"]["id"],
        "artifactBucket": out["bucket"]["id"],
        "vpcCidr": out["vpc"].get("cidr", c.vpc_cidr or ""),
    }
    text = render_slurm(c)["parallelcluster/cluster-config.yaml"]
    return fill(text, values)


class ParallelClusterKind:
    """Create, wait for and delete the cluster through `pcluster`."""

    name = "parallelcluster"
    after: tuple[str, ...] = (
        "subnet",
        "sg",
        "bucket",
        "artifacts",
        "placement-group",
        "fsx",
        "dra",
        "vpc",
        "route-table",
        "natgw",
        "s3-endpoint",
    )
    create_seconds, delete_seconds = 1200.0, 600.0

    def _pc(self, engine: Engine) -> ParallelCluster:
        if not engine.pcluster:
            raise PclusterError(
                "ParallelCluster's `pcluster` command was not found; run "
                "`fmctl setup parallelcluster` or put pcluster on PATH"
            )
        return ParallelCluster(engine.pcluster, engine.region)

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        found = self._pc(engine).describe(engine.cluster)
        if found is None:
            return None
        if found["clusterStatus"].endswith("_FAILED"):
            raise PclusterError(
                failure_text(engine.cluster, found) + f"; `fmctl down {engine.cluster}` removes it"
            )
        return {"id": engine.cluster, "status": found["clusterStatus"]}

    def create(self, engine: Engine, node: Node) -> Outputs:
        pc = self._pc(engine)
        config = Path(node.params["config_path"])
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(real_config(node.params["context"], engine))
        dry = pc.dryrun(engine.cluster, config)
        if not dry.ok:
            detail = "; ".join(f"{m.type}: {m.message}" for m in dry.messages)
            raise PclusterError(
                f"ParallelCluster's validators refused the config ({config}): {detail or dry.error}"
            )
        summary = pc.create(engine.cluster, config)
        return {"id": engine.cluster, "status": summary.get("clusterStatus")}

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        pc = self._pc(engine)

        def probe() -> dict[str, Any] | None:
            found = pc.describe(engine.cluster)
            if found is None:
                raise PclusterError(f"cluster {engine.cluster} disappeared while creating")
            status = found["clusterStatus"]
            if status.endswith("_FAILED"):
                raise PclusterError(failure_text(engine.cluster, found))
            return found if status.endswith("_COMPLETE") else None

        found = engine.wait_until(
            f"ParallelCluster {engine.cluster} to be CREATE_COMPLETE",
            probe,
            self.create_seconds,
            2100 + 600,
            node.id,
        )
        head = found.get("headNode", {})
        return {
            "id": engine.cluster,
            "status": found["clusterStatus"],
            "head_node": head.get("instanceId", ""),
            "head_ip": head.get("publicIpAddress") or head.get("privateIpAddress", ""),
        }

    def find_all(self, engine: Engine) -> list[Found]:
        if not engine.pcluster:
            return []
        found = self._pc(engine).describe(engine.cluster)
        return [Found(self.name, "parallelcluster", engine.cluster)] if found else []

    def delete(self, engine: Engine, found: Found) -> None:
        pc = self._pc(engine)
        pc.delete(engine.cluster)
        engine.wait_until(
            f"ParallelCluster {engine.cluster} to be deleted",
            lambda: True if pc.describe(engine.cluster) is None else None,
            self.delete_seconds,
            3600,
            found.logical_id,
        )
        self._terminate_leftovers(engine)

    def _terminate_leftovers(self, engine: Engine) -> None:
        """Compute nodes Slurm launched (outside CloudFormation) that outlived the stack."""
        ec2 = engine.aws.client("ec2")
        reservations = ec2.describe_instances(
            Filters=[
                {"Name": f"tag:{PCLUSTER_TAG}", "Values": [engine.cluster]},
                {
                    "Name": "instance-state-name",
                    "Values": ["pending", "running", "stopping", "stopped"],
                },
            ]
        )["Reservations"]
        ids = [
            i["InstanceId"]
            for r in reservations
            for i in r["Instances"]
            if {t["Key"]: t["Value"] for t in i.get("Tags", [])}.get(PCLUSTER_TAG) == engine.cluster
        ]
        if not ids:
            return
        engine.emit("parallelcluster", "deleting", f"{len(ids)} leftover compute instances")
        ec2.terminate_instances(InstanceIds=ids)
        engine.wait_until(
            f"{len(ids)} compute instances to terminate",
            functools.partial(_all_terminated, ec2, ids),
            120,
            1800,
            "parallelcluster",
        )


def _all_terminated(ec2: Any, ids: list[str]) -> bool | None:
    states = [
        i["State"]["Name"]
        for r in ec2.describe_instances(InstanceIds=ids)["Reservations"]
        for i in r["Instances"]
    ]
    return True if all(s == "terminated" for s in states) else None
