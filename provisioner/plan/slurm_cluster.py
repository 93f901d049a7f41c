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

#: The status of a cluster whose final config passed the validators and that the sandbox
#: does not create.
VALIDATED = "VALIDATED"

#: Validators fmctl suppresses when the AWS behind the run is the sandbox's emulator, because
#: moto's answers break them, not the config. Everything else runs.
SANDBOX_SUPPRESSED = (
    # Checks KeyName with DescribeKeyPairs; without one it warns, and a key pair a user names
    # exists in their account, never in the emulator.
    "KeyPairValidator",
    # Both call RunInstances with DryRun=True on the whole launch specification; moto answers
    # "The request must contain the parameter ebs" where EC2 answers DryRunOperation.
    "HeadNodeLaunchTemplateValidator",
    "ComputeResourceLaunchTemplateValidator",
)


def real_config(c: ClusterContext, engine: Engine, *, with_fsx: bool = True) -> str:
    """The ParallelCluster config of ``c`` with every placeholder filled from the engine.

    ``with_fsx`` False keeps a new file system in ParallelCluster's own settings (size,
    throughput, associations): the early check runs before fmctl creates it.
    """
    from provisioner.render.slurm import render_slurm

    out = engine.outputs
    if c.fsx is not None and "fsx" in out and with_fsx:
        c = dataclasses.replace(c, fsx=dataclasses.replace(c.fsx, existing_id=out["fsx"]["id"]))
    values = {
        "privateSubnetId": out["subnet/private"]["id"],
        "publicSubnetId": out.get("subnet/public", out["subnet/private"])["id"],
        "efaSecurityGroupId": out["sg/efa"]["id"],
        "artifactBucket": out["bucket"]["id"],
        "vpcCidr": out["vpc"].get("cidr", c.vpc_cidr or ""),
    }
    if "iam/amp-write" in out:
        values["ampWritePolicyArn"] = out["iam/amp-write"]["arn"]
    text = render_slurm(c)["parallelcluster/cluster-config.yaml"]
    return fill(text, values)


def _pcluster(engine: Engine) -> ParallelCluster:
    if not engine.pcluster:
        raise PclusterError(
            "ParallelCluster's `pcluster` command was not found; run "
            "`fmctl setup parallelcluster` or put pcluster on PATH"
        )
    return ParallelCluster(engine.pcluster, engine.region, env=engine.aws.child_env())


def _validate(engine: Engine, config: Path) -> str:
    """Run ParallelCluster's validators on ``config``; raise with their messages if they
    refuse it. Returns the warnings, for the log."""
    suppress = SANDBOX_SUPPRESSED if engine.aws.sandbox else ()
    dry = _pcluster(engine).dryrun(engine.cluster, config, suppress)
    if not dry.ok:
        detail = "; ".join(f"{m.type}: {m.message}" for m in dry.messages if m.level == "ERROR")
        raise PclusterError(
            f"ParallelCluster's validators refused the config ({config}): {detail or dry.error}"
        )
    return "; ".join(f"{m.type}: {m.message}" for m in dry.messages)


def _write(node: Node, text: str) -> Path:
    config = Path(node.params["config_path"])
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(text)
    return config


class ParallelClusterCheckKind:
    """ParallelCluster's validators, as early as they can run: once the network, security
    groups, placement groups and artifact bucket exist (seconds, no cost) and before the
    file system and the cluster (tens of minutes, billed).

    It cannot run before anything exists: loading a config, ParallelCluster looks its
    subnets up (DescribeSubnets) and refuses one that does not exist, so stand-in ids fail.
    """

    name = "parallelcluster-check"
    after: tuple[str, ...] = ()
    create_seconds, delete_seconds = 5.0, 0.0

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        if _pcluster(engine).describe(engine.cluster) is not None:
            return {"id": "cluster exists"}
        return None

    def create(self, engine: Engine, node: Node) -> Outputs:
        config = _write(node, real_config(node.params["context"], engine, with_fsx=False))
        warnings = _validate(engine, config)
        if warnings:
            engine.emit(node.id, "note", f"ParallelCluster warns: {warnings}")
        return {"id": "accepted", "config": str(config)}

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        return outputs

    def find_all(self, engine: Engine) -> list[Found]:
        return []  # nothing to delete: it creates nothing

    def delete(self, engine: Engine, found: Found) -> None:
        return None


class ParallelClusterKind:
    """Create, wait for and delete the cluster through `pcluster`.

    With ``validate_only`` in the node's params (the sandbox with ParallelCluster
    installed), it runs the validators on the final config and stops: ParallelCluster's
    create needs a CloudFormation stack of resources the emulator lacks.
    """

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
        "iam-policy",
    )
    create_seconds, delete_seconds = 1200.0, 600.0

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        found = _pcluster(engine).describe(engine.cluster)
        if found is None:
            return None
        status = found["clusterStatus"]
        if status == "CREATE_FAILED":
            raise PclusterError(
                failure_text(engine.cluster, found) + f"; `fmctl down {engine.cluster}` removes it"
            )
        if status == "UPDATE_FAILED":  # rolled back: it runs on its previous config
            engine.emit(node.id, "exists", "the last update failed and was rolled back")
        settled = status.endswith(("_COMPLETE", "_FAILED"))
        return {"id": engine.cluster, "status": status, "reconcile": settled}

    def create(self, engine: Engine, node: Node) -> Outputs:
        config = _write(node, real_config(node.params["context"], engine))
        # Again on the final config: now with the file system's id and its interfaces.
        _validate(engine, config)
        if node.params.get("validate_only"):
            return {"id": engine.cluster, "status": VALIDATED, "config": str(config)}
        summary = _pcluster(engine).create(engine.cluster, config)
        return {"id": engine.cluster, "status": summary.get("clusterStatus")}

    def _reconcile(self, engine: Engine, node: Node) -> bool:
        """Bring an existing cluster to the spec: ParallelCluster says what would change
        and whether it may change now; fmctl never stops the compute fleet itself (that
        kills running jobs)."""
        pc = _pcluster(engine)
        config = _write(node, real_config(node.params["context"], engine))
        plan = pc.update_dryrun(engine.cluster, config)
        if plan.ok and not plan.changes:
            return False
        changed = ", ".join(plan.parameters) or "the config"
        if plan.ok:
            engine.emit(node.id, "updating", changed)
            pc.update(engine.cluster, config)
            return True
        if plan.needs_fleet_stop:
            raise PclusterError(
                f"changing {changed} needs the compute fleet stopped, which ends running "
                f"jobs, so fmctl does not do it: `pcluster update-compute-fleet --cluster-name "
                f"{engine.cluster} --status STOP_REQUESTED --region {engine.region}`, then "
                "`fmctl up` again (and START_REQUESTED after)"
            )
        detail = "; ".join(f"{m.type}: {m.message}" for m in plan.messages)
        raise PclusterError(f"ParallelCluster refuses to update {changed}: {detail or plan.error}")

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        if outputs.get("status") == VALIDATED:
            return outputs
        updating = bool(outputs.get("reconcile")) and self._reconcile(engine, node)
        # A rolled-back update left a working cluster; only a new update's failure counts.
        failed = ("_FAILED",) if updating or not outputs.get("reconcile") else ("CREATE_FAILED",)
        pc = _pcluster(engine)

        def probe() -> dict[str, Any] | None:
            found = pc.describe(engine.cluster)
            if found is None:
                raise PclusterError(f"cluster {engine.cluster} disappeared while creating")
            status = found["clusterStatus"]
            if status.endswith(failed):
                raise PclusterError(failure_text(engine.cluster, found))
            return found if status.endswith(("_COMPLETE", "UPDATE_FAILED")) else None

        found = engine.wait_until(
            f"ParallelCluster {engine.cluster} to be CREATE_COMPLETE or UPDATE_COMPLETE",
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
        found = _pcluster(engine).describe(engine.cluster)
        return [Found(self.name, "parallelcluster", engine.cluster)] if found else []

    def delete(self, engine: Engine, found: Found) -> None:
        pc = _pcluster(engine)
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
