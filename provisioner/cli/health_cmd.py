"""`fmctl health NAME`: every GPU node's place in the health loop, its last fault, and each
pool's repair budget (read-only)."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from provisioner.cli.common import GuardedCommand, _fail, _load, _target, fail_with
from provisioner.cli.options import name_argument, target_options


@click.command("health", cls=GuardedCommand)
@name_argument()
@click.option("-f", "--file", "path", help="The cluster spec (default: the one `up` saved).")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@click.option(
    "--watch",
    type=click.IntRange(5),
    default=None,
    metavar="SECONDS",
    help="Look again every SECONDS until interrupted.",
)
@target_options
def health(
    name: str,
    path: str | None,
    output: str,
    watch: int | None,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """Each node: healthy, suspect (a fault held by the repair budget), draining, repairing,
    verifying, drained (out of service until a person acts) or failed; its last fault
    (code, class, action), since when; each pool's nodes in repair against
    health.maxInRepair; recent events. On Slurm from the controller (sinfo, through SSM Run
    Command), on EKS from the Kubernetes API."""
    from provisioner.ops.check import CheckUnavailable, saved_spec
    from provisioner.ops.check import health as gather
    from provisioner.ops.target import home_of

    try:
        spec = _load(path, None).resolved if path else saved_spec(home_of(state_dir), name)
    except CheckUnavailable as exc:
        fail_with(exc)
    if spec.metadata.name != name:
        _fail(f"the spec is for {spec.metadata.name}, not {name}", "give NAME's own spec with -f")
    target = _target(spec.metadata.region, state_dir, sandbox)
    while True:
        try:
            report = gather(spec, target)
        except CheckUnavailable as exc:
            fail_with(exc)
        if output == "json":
            click.echo(json.dumps(report.as_data(), indent=2))
        else:
            _print(report)
        if watch is None:
            return
        time.sleep(watch)


def _print(report: Any) -> None:
    """Each pool's counts, then only the nodes that are not healthy (``-o json`` has
    every node): on a thousand-node cluster, the ones to look at."""
    click.echo(f"{report.cluster} ({report.scheduler})")
    for pool in report.pools:
        states: dict[str, int] = {}
        for node in report.nodes:
            if node.pool == pool.name:
                states[node.state] = states.get(node.state, 0) + 1
        counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
        click.echo(
            f"  pool {pool.name}: {pool.nodes} nodes ({counts}); {pool.in_repair} in repair, "
            f"budget {pool.budget}"
        )
    sick = [n for n in report.nodes if n.state != "healthy"]
    width = max((len(n.name) for n in sick), default=4)
    for node in sick:
        fault = (
            f"  {node.fault.code} {node.fault.fault_class} -> {node.fault.action}"
            if node.fault
            else ""
        )
        since = f"  since {node.since}" if node.since else ""
        click.echo(f"  {node.name:<{width}}  {node.pool:<8} {node.state:<10}{fault}{since}")
        if node.detail:
            click.echo(f"  {'':<{width}}  {node.detail}")
    for event in report.events[:10]:
        click.echo(f"  event {event.time} {event.node}: {event.what}")
    for note in report.notes:
        click.echo(f"  note: {note}")
