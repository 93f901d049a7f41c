"""Taking Slurm nodes of a PCS cluster out of service before `up` ends them: a node group
scaled in, or a pool removed.

PCS names a compute node group's Slurm nodes after the group, numbered up to its maximum
instance count (``compute-1-[1-4]``; a maximum of 8 makes it ``compute-1-[1-8]``: the AWS
PCS User Guide, "Explore the cluster environment in AWS PCS"), so a group scaled from 4 to
2 loses ``NAME-[3-4]`` and a group removed all of ``NAME-[1-N]``. Those nodes are drained
on the cluster's login node (SSM Run Command, slurm/lib/drain-nodes.sh): no new job lands
on them, their running jobs are waited for or requeued (compute.drain.jobs), for at most
compute.drain.timeout; past it `up` stops, the nodes left drained, naming the jobs.
"""

from __future__ import annotations

import shlex

from provisioner.resources.base import Owned
from provisioner.resources.context import Context, DrainSettings
from provisioner.resources.errors import ResourceError
from provisioner.resources.pcs_api import client, unless_gone
from provisioner.resources.ssm_run import bundle, head_node, run_script
from provisioner.shipped import shipped_dir

#: drain-nodes.sh's exit status when its timeout passed with jobs still running.
TIMED_OUT = 3


def nodelist(group: str, first: int, last: int) -> str:
    """``NAME-N`` or ``NAME-[FIRST-LAST]`` (Slurm's compressed form)."""
    return f"{group}-{first}" if first == last else f"{group}-[{first}-{last}]"


def drain_script(nodes: str, settings: DrainSettings, reason: str, scale: float = 1.0) -> str:
    """What Run Command runs on the login node: this fmctl's drain-nodes.sh (its timeout
    on the run's clock: ``scale``, the sandbox's)."""
    lib = shipped_dir("slurm") / "lib"
    files = {
        "drain-nodes.sh": (lib / "drain-nodes.sh").read_text(),
        "slurm-prefix.sh": (lib / "slurm-prefix.sh").read_text(),
    }
    timeout = max(1, int(settings.timeout_s * scale))
    args = [nodes, "--timeout", str(timeout), "--jobs", settings.jobs]
    return bundle(files, f'bash "$work/drain-nodes.sh" {shlex.join([*args, "--reason", reason])}')


def drain(ctx: Context, rid: str, nodes: str, settings: DrainSettings, why: str) -> None:
    """Drain ``nodes`` on the login node; ResourceError (the jobs named) when they do not
    empty in time, or when the drain could not run."""
    login = head_node(ctx, "pcs")
    ctx.emit(rid, "updating", f"draining {nodes} on login node {login} ({why})")
    # The wait is drain-nodes.sh's own; Run Command's limit leaves it room.
    limit = settings.timeout_s + 300
    found = run_script(
        ctx,
        login,
        drain_script(nodes, settings, f"fmctl: {why}", ctx.time_scale),
        f"fmctl up {ctx.cluster}: drain {nodes}",
        expected=min(settings.timeout_s, 120.0),
        limit=limit,
    )
    out = str(found.get("StandardOutputContent", ""))
    for line in out.splitlines():
        if line.startswith("requeued "):
            ctx.emit(rid, "note", f"job {line.split()[1]} requeued (compute.drain.jobs)")
    code = int(found.get("ResponseCode", -1))
    if found.get("Status") == "Success" and code == 0:
        return
    running = [
        line.removeprefix("running ") for line in out.splitlines() if line.startswith("running ")
    ]
    if code == TIMED_OUT:
        raise ResourceError(
            f"{len(running)} job(s) still running on {nodes} after "
            f"{settings.timeout_s / 60:.0f} min: {'; '.join(running[:8])}",
            hint="the nodes stay drained and nothing was ended; let the jobs finish (or "
            "scancel them), set compute.drain.jobs: requeue, or raise compute.drain.timeout, "
            "then `fmctl up` again",
        )
    raise ResourceError(
        f"could not drain {nodes} on login node {login}: {found.get('Status')} "
        f"(exit {code}): {str(found.get('StandardErrorContent', '')).strip()[-300:]}",
        hint="SSM's agent must run on the login node (it does on PCS's sample AMIs); "
        "compute.drain.timeout: 0 takes the nodes without draining them (their jobs end)",
    )


def drain_group(ctx: Context, rid: str, cluster: str, group: str, settings: DrainSettings) -> None:
    """Drain every Slurm node of a compute node group (by id) before it goes."""
    ng = unless_gone(
        lambda: client(ctx).get_compute_node_group(
            clusterIdentifier=cluster, computeNodeGroupIdentifier=group
        )["computeNodeGroup"]
    )
    if ng is None or ng.get("status") != "ACTIVE":
        return
    top = int((ng.get("scalingConfiguration") or {}).get("maxInstanceCount", 0))
    if top > 0:
        nodes = nodelist(str(ng["name"]), 1, top)
        drain(ctx, rid, nodes, settings, f"node group {ng['name']} removed")


def plan_note(nodes: str) -> str:
    """What the plan says of nodes `up` drains (their jobs are not counted: reading them
    takes Run Command, which a plan never sends)."""
    return (
        f"up first drains {nodes} on the login node: no new job lands there, running ones "
        "are waited for or requeued (compute.drain.jobs), for at most compute.drain.timeout "
        "(their jobs are counted as up drains them: reading them takes Run Command, which "
        "plan does not send)"
    )


def group_note(ctx: Context, owned: Owned) -> str | None:
    """The plan's note for a node group `up` removes (its id ``CLUSTER/GROUP``)."""
    cluster, _, group = owned.id.partition("/")
    ng = unless_gone(
        lambda: client(ctx).get_compute_node_group(
            clusterIdentifier=cluster, computeNodeGroupIdentifier=group
        )["computeNodeGroup"]
    )
    top = int(((ng or {}).get("scalingConfiguration") or {}).get("maxInstanceCount", 0))
    if ng is None or top == 0:
        return None
    return plan_note(nodelist(str(ng["name"]), 1, top))
