"""The ParallelCluster cluster, on the infrastructure fmctl made, and its validators run early.

Its config is the one ``render`` writes, with the file system by ``FileSystemId`` (so the file
system's life is fmctl's and it outlives the cluster); its placeholders are filled from the
references in the params. What an existing cluster would change, and whether it may change
now, is ParallelCluster's to say (`update-cluster --dryrun true`: its change set, and an
update error per setting its update policy refuses); fmctl never stops the compute fleet
itself (that ends running jobs). Delete goes through ParallelCluster, then terminates
compute instances Slurm launched outside CloudFormation that still carry the cluster's tag.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from provisioner.drivers.pcluster import PclusterError, failure_text
from provisioner.graph.ref import UNKNOWN, Ref
from provisioner.render.placeholders import fill
from provisioner.resources.base import FieldChange, How, Kind, Observed, Owned, Request
from provisioner.resources.context import Context
from provisioner.resources.fsx import FsxOut
from provisioner.resources.fsx_dra import DraOut
from provisioner.resources.pcluster_check import (
    CheckOut,
    ConfigRefs,
    config_values,
    described,
    pcluster,
    validate_config,
    write_config,
)

#: Tag ParallelCluster puts on every instance it or Slurm launches.
PCLUSTER_TAG = "parallelcluster:cluster-name"
#: The status of a cluster whose final config passed the validators and that the sandbox
#: does not create.
VALIDATED = "VALIDATED"


@dataclass(frozen=True)
class PclusterOut:
    """The cluster: status, and how to reach its head node."""

    id: str
    status: str
    head_node: str = ""
    head_ip: str = ""
    config: str = ""


@dataclass(frozen=True)
class PclusterParams:
    """The cluster's final config (file system by FileSystemId) and what fills it."""

    config: str
    config_path: str
    refs: ConfigRefs
    check: Ref[CheckOut]
    fsx: Ref[FsxOut] | None = None
    links: tuple[Ref[DraOut], ...] = ()
    #: The sandbox with ParallelCluster installed: validate the final config, create nothing.
    validate_only: bool = False


@dataclass(frozen=True)
class PclusterLive:
    """The config ParallelCluster runs (compared by ParallelCluster itself)."""

    config: Any


class ParallelClusterKind(Kind[PclusterParams, PclusterOut, PclusterLive]):
    """Create, update, wait for and delete the cluster through `pcluster`."""

    name, params, outputs = "parallelcluster", PclusterParams, PclusterOut
    create_seconds, update_seconds, delete_seconds = 1200.0, 900.0, 600.0

    def read(self, req: Request[PclusterParams]) -> Observed[PclusterOut, PclusterLive] | None:
        found = described(req.ctx)
        if found is None:
            return None
        status = str(found["clusterStatus"])
        if status == "CREATE_FAILED":
            raise PclusterError(
                failure_text(req.ctx.cluster, found)
                + f"; `fmctl down {req.ctx.cluster}` removes it"
            )
        if status == "UPDATE_FAILED":  # rolled back: it runs on its previous config
            req.ctx.emit(req.rid, "exists", "the last update failed and was rolled back")
        settled = status.endswith(("_COMPLETE", "_FAILED"))
        out = _outputs(req.ctx, found)
        return Observed(out, PclusterLive("deployed"), req.ctx.cluster, None if settled else status)

    def desired(
        self, req: Request[PclusterParams], observed: Observed[PclusterOut, PclusterLive]
    ) -> PclusterLive:
        return PclusterLive("deployed")

    def diff(
        self, req: Request[PclusterParams], observed: Observed[PclusterOut, PclusterLive]
    ) -> list[FieldChange]:
        """ParallelCluster's own answer: each changed setting, and whether its update policy
        allows the change now (`update-cluster --dryrun true`; nothing is written)."""
        values = config_values(req.ctx, req.params.refs, req.params.fsx)
        if any(v is UNKNOWN for v in values.values()):
            return [
                FieldChange(
                    "config",
                    "deployed",
                    UNKNOWN,
                    How.UPDATE,
                    "resources it refers to change first; ParallelCluster judges the update then",
                )
            ]
        config = write_config(req.params.config_path, fill(req.params.config, values))
        plan = pcluster(req.ctx).update_dryrun(req.ctx.cluster, config)
        refused = {m.type: m.message for m in plan.messages if m.level == "ERROR"}
        out = []
        for change in plan.changes:
            parameter = str(change.get("parameter", "?"))
            reason = refused.get(parameter)
            if reason and plan.needs_fleet_stop:
                reason += (
                    "; fmctl never stops the compute fleet itself (that ends running jobs): "
                    f"`pcluster update-compute-fleet --cluster-name {req.ctx.cluster} --status "
                    f"STOP_REQUESTED --region {req.ctx.region}`, then `fmctl up` again (and "
                    "START_REQUESTED after)"
                )
            out.append(
                FieldChange(
                    parameter,
                    change.get("currentValue"),
                    change.get("requestedValue"),
                    How.IMMUTABLE if reason else How.UPDATE,
                    reason or "ParallelCluster's update policy allows it now (update-cluster)",
                )
            )
        if not plan.ok and not out:
            detail = "; ".join(f"{m.type}: {m.message}" for m in plan.messages) or plan.error
            out.append(FieldChange("config", "deployed", "?", How.IMMUTABLE, str(detail)))
        return out

    def create(self, req: Request[PclusterParams]) -> PclusterOut:
        config = write_config(
            req.params.config_path,
            fill(req.params.config, config_values(req.ctx, req.params.refs, req.params.fsx)),
        )
        # Again on the final config: now with the file system's id and its interfaces.
        validate_config(req.ctx, config)
        if req.params.validate_only:
            return PclusterOut(req.ctx.cluster, VALIDATED, config=str(config))
        pcluster(req.ctx).create(req.ctx.cluster, config)
        return self._settled(req.ctx, req.rid, ("_FAILED",), self.create_seconds)

    def wait(
        self, req: Request[PclusterParams], observed: Observed[PclusterOut, PclusterLive]
    ) -> PclusterOut:
        return self._settled(req.ctx, req.rid, ("CREATE_FAILED",), self.create_seconds)

    def update(
        self,
        req: Request[PclusterParams],
        observed: Observed[PclusterOut, PclusterLive],
        changes: Sequence[FieldChange],
    ) -> PclusterOut:
        config = write_config(
            req.params.config_path,
            fill(req.params.config, config_values(req.ctx, req.params.refs, req.params.fsx)),
        )
        pc = pcluster(req.ctx)
        plan = pc.update_dryrun(req.ctx.cluster, config)
        if plan.ok and not plan.changes:
            return observed.outputs
        changed = ", ".join(plan.parameters) or "the config"
        if not plan.ok:
            if plan.needs_fleet_stop:
                raise PclusterError(
                    f"changing {changed} needs the compute fleet stopped, which ends running "
                    f"jobs, so fmctl does not do it: `pcluster update-compute-fleet "
                    f"--cluster-name {req.ctx.cluster} --status STOP_REQUESTED --region "
                    f"{req.ctx.region}`, then `fmctl up` again (and START_REQUESTED after)"
                )
            detail = "; ".join(f"{m.type}: {m.message}" for m in plan.messages)
            raise PclusterError(
                f"ParallelCluster refuses to update {changed}: {detail or plan.error}"
            )
        req.ctx.emit(req.rid, "updating", changed)
        pc.update(req.ctx.cluster, config)
        return self._settled(req.ctx, req.rid, ("_FAILED",), self.update_seconds)

    def _settled(
        self, ctx: Context, rid: str, failed: tuple[str, ...], expected: float
    ) -> PclusterOut:
        pc = pcluster(ctx)

        def probe() -> dict[str, Any] | None:
            found = pc.describe(ctx.cluster)
            if found is None:
                raise PclusterError(f"cluster {ctx.cluster} disappeared while it was being made")
            status = str(found["clusterStatus"])
            if status.endswith(failed):
                raise PclusterError(failure_text(ctx.cluster, found))
            return found if status.endswith(("_COMPLETE", "UPDATE_FAILED")) else None

        found = ctx.wait_until(
            f"ParallelCluster {ctx.cluster} to be CREATE_COMPLETE or UPDATE_COMPLETE",
            probe,
            expected,
            2100 + 600,
            rid,
        )
        return _outputs(ctx, found)

    def find_owned(self, ctx: Context) -> list[Owned]:
        if not ctx.pcluster:
            return []
        return [self.owned_item("parallelcluster", ctx.cluster)] if described(ctx) else []

    def delete(self, ctx: Context, owned: Owned) -> None:
        pc = pcluster(ctx)
        pc.delete(ctx.cluster)
        ctx.wait_until(
            f"ParallelCluster {ctx.cluster} to be deleted",
            lambda: True if pc.describe(ctx.cluster) is None else None,
            self.delete_seconds,
            3600,
            owned.resource,
        )
        _terminate_leftovers(ctx)


def _outputs(ctx: Context, found: dict[str, Any]) -> PclusterOut:
    head = found.get("headNode", {})
    return PclusterOut(
        ctx.cluster,
        str(found["clusterStatus"]),
        head.get("instanceId", ""),
        head.get("publicIpAddress") or head.get("privateIpAddress", ""),
    )


def _terminate_leftovers(ctx: Context) -> None:
    """Compute nodes Slurm launched (outside CloudFormation) that outlived the stack."""
    ec2 = ctx.aws.client("ec2")
    reservations = ec2.describe_instances(
        Filters=[
            {"Name": f"tag:{PCLUSTER_TAG}", "Values": [ctx.cluster]},
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
        if {t["Key"]: t["Value"] for t in i.get("Tags", [])}.get(PCLUSTER_TAG) == ctx.cluster
    ]
    if not ids:
        return
    ctx.emit("parallelcluster", "deleting", f"{len(ids)} leftover compute instances")
    ec2.terminate_instances(InstanceIds=ids)
    ctx.wait_until(
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
