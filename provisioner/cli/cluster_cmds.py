"""`fmctl down`, `status`, `topology` and `sandbox`: commands about a named cluster (or the
emulator), from AWS tags."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from provisioner.cli import jsonout
from provisioner.cli.common import (
    GuardedCommand,
    _fail,
    _failures,
    _notice,
    _report,
    _target,
    fail_with,
    missing_cluster,
)
from provisioner.cli.options import (
    cluster_name_check,
    name_argument,
    output_option,
    region_option,
    state_option,
    target_options,
    wait_option,
)


def _print_kube(kube: Any) -> None:
    click.echo(f"EKS: {kube.status}, Kubernetes {kube.version}")
    for addon, version, status in kube.addons:
        click.echo(f"  add-on {addon:<24} {version:<22} {status}")
    sized = {row.pool: row for row in kube.autoscaled}
    for pool, nodes in kube.pools:
        line = f"  pool {pool}: {len(nodes)} nodes"
        if pool in sized:
            line += f" ({sized[pool]})"
        click.echo(line)
        for n in nodes:
            click.echo(
                f"    {n.name:<34} {'Ready' if n.ready else 'NotReady':<9} "
                f"gpu {n.gpus:>2}  efa {n.efa:>2}" + (f"  ! {n.problem}" if n.problem else "")
            )
    if kube.stack:
        click.echo("  stack:")
        for row in kube.stack:
            click.echo(f"    {row}")
    for queue in kube.queues:
        click.echo(f"  queue {queue.name}: {queue.admitted} admitted, {queue.pending} pending")
        for w in queue.workloads:
            where = f"{w.namespace}/{w.name}"
            said = f"on {w.flavor}" if w.state == "admitted" else w.reason
            click.echo(f"    {where:<44} {w.state:<9} {w.pods:>3} pods  {said}")
    if kube.domains:
        click.echo("  compute domains:")
        for d in kube.domains:
            where = f"{d.namespace}/{d.name}"
            click.echo(f"    {where:<44} {d.status:<9} {d.ready}/{d.nodes} nodes ready")


@click.command("down", cls=GuardedCommand)
@name_argument()
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--skip-kubernetes-cleanup",
    is_flag=True,
    help="EKS: do not reach into the cluster to delete load balancers and volumes its "
    "controllers made (for an API this machine cannot reach; they may be left behind).",
)
@click.option(
    "--keep-state",
    is_flag=True,
    help="Keep the cluster's local folder (saved spec, state, event log); down removes it.",
)
@click.option(
    "--keep-logs",
    is_flag=True,
    help="Keep the EKS control-plane log group (untagged from the cluster, its retention "
    "still applies); down deletes it.",
)
@output_option
@region_option
@wait_option
@state_option
@target_options
def down(
    name: str,
    yes: bool,
    skip_kubernetes_cleanup: bool,
    keep_state: bool,
    keep_logs: bool,
    output: str,
    region: str,
    wait: bool,
    state_url: str | None,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """Delete everything tagged as cluster NAME's, dependents first (works from tags alone)."""
    from provisioner.cli.progress import Progress
    from provisioner.ops.engine import down as run_down
    from provisioner.ops.engine import owned_by
    from provisioner.ops.errors import LockHeld
    from provisioner.ops.kubeconfig import forget_locally
    from provisioner.ops.teardown import data_notes

    as_json = output == "json"
    if as_json and not yes:
        _fail("`down -o json` does not ask before deleting", "pass --yes")
    target = _target(region, state_dir, sandbox, state_url)
    found = owned_by(target, name, skip_kubernetes_cleanup)
    if not found:
        # Said as `status` says it; `down` still succeeds: gone is what it was asked for
        # (a re-run after a down that stopped late converges), where `status` has nothing
        # to report and fails.
        click.echo(f"{name}: {missing_cluster(name, region)}: nothing to delete", err=as_json)
        # A down stopped after its last delete left these.
        local = forget_locally(target, name, keep_state, found_nothing=True)
        for line in local:
            click.echo(f"{name}: {line}", err=as_json)
        if as_json:
            jsonout.line(
                {
                    "summary": {
                        "cluster": name,
                        "region": region,
                        "ok": True,
                        "exists": False,
                        "deleted": 0,
                        "local": local,
                    }
                }
            )
        return
    notes = data_notes(target, found, keep_logs)
    keep = frozenset({"log-group"} if keep_logs else ())
    if not yes:
        if not sys.stdin.isatty():
            _fail("`down` asks before deleting", "pass --yes to run without asking")
        click.echo(f"down {name} in {region} deletes:")
        for o in sorted(found, key=lambda o: (o.kind, o.resource)):
            verb = "keeps " if o.kind in keep else ""
            click.echo(f"  {verb}{o.kind:<16} {o.resource:<24} {o.id}")
    # Said with --yes too: the one thing a teardown cannot give back.
    for line in notes:
        click.echo(f"warning: {line}" if not line.startswith("  ") else line, err=True)
    if not yes:
        click.confirm(f"delete {len(found)} resources of {name}?", abort=True)
    click.echo(f"down {name}:", err=as_json)
    progress = jsonout.JsonEvents() if as_json else Progress()
    try:
        result, found = run_down(
            name, target, progress, skip_kubernetes_cleanup, wait, _notice, keep
        )
    except LockHeld as exc:
        fail_with(exc)
    finally:
        progress.close()
    ok = _report(result, f"down {name}", exit=not as_json)
    local = forget_locally(target, name, keep_state) if ok else []
    if as_json:
        jsonout.line(
            {
                "summary": {
                    "cluster": name,
                    "region": region,
                    "ok": ok,
                    "exists": True,
                    "deleted": len(found) if ok else len(result.done),
                    "wall_s": round(result.wall, 1),
                    "local": local,
                    **_failures(result),
                }
            }
        )
        if not ok:
            sys.exit(1)
        return
    click.echo(f"{name}: {len(found)} resources deleted in {result.wall:.1f}s")
    for line in local:
        click.echo(f"{name}: {line}")


@click.command("status", cls=GuardedCommand)
@name_argument()
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@region_option
@state_option
@target_options
def status(
    name: str,
    output: str,
    region: str,
    state_url: str | None,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """What cluster NAME has in AWS, from its tags (local state not needed)."""
    from provisioner.ops.status import status as read_status

    target = _target(region, state_dir, sandbox, state_url)
    seen = read_status(target, name)
    if output == "json":
        click.echo(json.dumps(seen.as_data(), indent=2))
        # As the text: a cluster that does not exist is a failed status.
        sys.exit(0 if seen.resources else 1)
    if not seen.resources:
        click.echo(f"{name}: {missing_cluster(name, region)}")
        sys.exit(1)
    click.echo(f"{name} in {region}: {len(seen.resources)} resources")
    for o in sorted(seen.resources, key=lambda o: (o.kind, o.resource)):
        click.echo(f"  {o.kind:<16} {o.resource:<24} {o.id}")
    if seen.slurm is not None:
        click.echo(f"ParallelCluster {name}: {seen.slurm.status}, head node {seen.slurm.head_node}")
        if seen.slurm.exporters:
            states = ", ".join(f"{n} {state}" for n, state in seen.slurm.exporters)
            click.echo(f"  head node exporters: {states}")
            if any(state != "ok" for _, state in seen.slurm.exporters):
                click.echo(
                    "  (an exporter that could not be installed leaves its dashboards empty; "
                    f"`fmctl check {name}` reports the compute nodes')"
                )
    if seen.kube is not None:
        _print_kube(seen.kube)
    if seen.pcs is not None:
        for line in seen.pcs.lines():
            click.echo(line)
    for block in seen.blocks:
        click.echo(block.line())
    if seen.budget is not None:
        click.echo(seen.budget.line())
    for line in seen.access:
        click.echo(line)


@click.command("topology", cls=GuardedCommand)
@name_argument()
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@click.option("--no-publish", is_flag=True, help="Only show it; do not upload topology.json.")
@region_option
@target_options
def topology(
    name: str, output: str, no_publish: bool, region: str, sandbox: bool, state_dir: str | None
) -> None:
    """Read where NAME's running compute nodes sit in the network and publish it for the head
    node, which rewrites Slurm's topology.conf from it (every 2 minutes). Nothing is
    published when no node is placed; on EKS, nodes carry their place as labels."""
    target = _target(region, state_dir, sandbox)
    _print_topology(name, target, output, not no_publish)


def _print_topology(name: str, target: Any, output: str, upload: bool) -> None:
    from provisioner.ops.topology import publish_topology

    published = publish_topology(target, name, upload)
    if output == "json":
        reservations = [r.as_data() for r in published.reservations]
        shown = {**published.document, "publishedTo": published.where}
        click.echo(json.dumps({**shown, "reservations": reservations}, indent=2))
        return
    for line in published.lines:
        click.echo(f"topology: {line}")
    if published.where:
        click.echo(
            f"topology: published {published.where}; the head node installs topology.conf from it"
        )


@click.group("sandbox")
def sandbox() -> None:
    """The local AWS emulator used by --sandbox."""


@sandbox.command("stop", cls=GuardedCommand)
@click.option("--state-dir", envvar="FMCTL_HOME", metavar="DIR")
def sandbox_stop(state_dir: str | None) -> None:
    """Stop the emulator (its state goes with it)."""
    from provisioner.ops.target import home_of, stop_sandbox

    click.echo("sandbox stopped" if stop_sandbox(home_of(state_dir)) else "no sandbox running")


@sandbox.command("fault", cls=GuardedCommand)
@click.argument("name")
@click.argument("node")
@click.option("--xid", type=click.IntRange(1, 999), help="An NVIDIA Xid on the node's GPUs.")
@click.option("--gpu-missing", type=click.IntRange(1, 64), metavar="N", help="N GPUs gone.")
@click.option("--efa-down", type=click.IntRange(1, 64), metavar="N", help="N EFA devices failing.")
@click.option("--ecc-dbe", is_flag=True, help="An uncorrectable (double-bit) ECC error.")
@click.option("--clear", is_flag=True, help="The node is healthy again.")
@click.option("--region", default=None, metavar="REGION", help="Default: the cluster's.")
@click.option("--state-dir", envvar="FMCTL_HOME", metavar="DIR")
def sandbox_fault(
    name: str,
    node: str,
    xid: int | None,
    gpu_missing: int | None,
    efa_down: int | None,
    ecc_dbe: bool,
    clear: bool,
    region: str | None,
    state_dir: str | None,
) -> None:
    """Make NODE of sandbox EKS cluster NAME report a fault, as the node monitoring agent
    on a real node would (or not: it sets conditions only for the faults it treats as
    fatal); node auto repair then cordons and replaces the node on the sandbox's clock. To
    rehearse the health loop: `fmctl health NAME --sandbox` shows each step. On a PCS
    cluster NODE is a compute node group's instance (i-...), and the group's health
    monitoring acts on it as its repairAction (spec health.repair) says."""
    from provisioner.ops.errors import SandboxUnavailable, as_error
    from provisioner.ops.region import RegionUnknown, resolve_region
    from provisioner.ops.target import home_of
    from provisioner.ops.target import sandbox_fault as inject

    faults: list[dict[str, object]] = []
    if xid is not None:
        faults.append({"xid": xid})
    if gpu_missing is not None:
        faults.append({"gpuMissing": gpu_missing})
    if efa_down is not None:
        faults.append({"efaDown": efa_down})
    if ecc_dbe:
        faults.append({"eccDbe": True})
    if clear:
        faults.append({"clear": True})
    if len(faults) != 1:
        _fail(
            "say one fault",
            "one of --xid N, --gpu-missing N, --efa-down N, --ecc-dbe or --clear",
        )
    home = home_of(state_dir)
    try:
        where = resolve_region(region, name, home, True)
        said = inject(home, where, name, node, faults[0])
    except (RegionUnknown, SandboxUnavailable) as exc:
        _fail(
            str(exc),
            "`fmctl up --sandbox` starts the sandbox; --region names the cluster's",
            as_error(exc, "fmctl sandbox").kind,
        )
    click.echo(said)


@sandbox.command("spend", cls=GuardedCommand)
@click.argument("name", callback=cluster_name_check)
@click.argument("usd", type=float)
@click.option("--region", default=None, metavar="REGION", help="Default: the cluster's.")
@click.option("--state-dir", envvar="FMCTL_HOME", metavar="DIR")
def sandbox_spend(name: str, usd: float, region: str | None, state_dir: str | None) -> None:
    """Set what cluster NAME has spent, as AWS Budgets sees it, to USD: the notifications of
    its budget (cost.budget) that this crosses go out, as AWS would send them. To rehearse a
    budget: `up --sandbox` a spec with cost.budget, then spend past its limit."""
    from provisioner.ops.errors import SandboxUnavailable, as_error
    from provisioner.ops.region import RegionUnknown, resolve_region
    from provisioner.ops.target import home_of
    from provisioner.ops.target import sandbox_spend as spend

    home = home_of(state_dir)
    try:
        sent = spend(home, name, resolve_region(region, name, home, True), usd)
    except (RegionUnknown, SandboxUnavailable) as exc:
        _fail(
            str(exc),
            "`fmctl up --sandbox` a spec with cost.budget first",
            as_error(exc, "fmctl sandbox").kind,
        )
    if not sent:
        click.echo("no notification crossed its threshold")
    for item in sent:
        click.echo(f"{item['threshold']:g}% -> {item['to']}: {item['outcome']}")


@sandbox.command("advance", cls=GuardedCommand)
@click.argument("duration")
@click.option("--state-dir", envvar="FMCTL_HOME", metavar="DIR")
def sandbox_advance(duration: str, state_dir: str | None) -> None:
    """Move the sandbox's clock on by DURATION (30m, 8h, 1d): the EventBridge Scheduler
    schedules then due run, and EC2's Capacity Block warnings then due reach the rules that
    match, as AWS would run them. To rehearse a ttl: `up --sandbox` a spec with
    metadata.ttl, advance past it, and its node groups are at zero."""
    from provisioner.ops.errors import SandboxUnavailable, as_error
    from provisioner.ops.gc import parse_age
    from provisioner.ops.target import home_of
    from provisioner.ops.target import sandbox_advance as advance

    seconds = parse_age(duration)
    if seconds is None:
        _fail(f"{duration!r} is not a duration", "a number and a unit: 30m, 8h, 1d, 1h30m")
    try:
        runs = advance(home_of(state_dir), float(seconds))
    except SandboxUnavailable as exc:
        _fail(
            str(exc), "`fmctl up --sandbox` starts the sandbox", as_error(exc, "fmctl sandbox").kind
        )
    if not runs:
        click.echo("no schedule or event was due")
    for run in runs:
        # A schedule's run, or an EC2 event delivered to a rule's target.
        source = run["schedule"] if "schedule" in run else f"rule {run['rule']} ({run['event']})"
        line = f"{source}: {run['target'].rsplit(':', 1)[-1]} {run['outcome']}"
        click.echo(line + (f" ({run['error']})" if run.get("error") else ""))
