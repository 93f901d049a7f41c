"""`fmctl cost NAME`: what the cluster costs per hour now, and what it has cost so far."""

from __future__ import annotations

import json
import sys

import click

from provisioner.cli.common import GuardedCommand, _target
from provisioner.cli.options import name_argument, region_option, target_options


@click.command("cost", cls=GuardedCommand)
@name_argument()
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@click.option(
    "--no-cost-explorer",
    is_flag=True,
    help="Do not ask Cost Explorer what the cluster has cost so far ($0.01 a request).",
)
@region_option
@target_options
def cost(
    name: str,
    output: str,
    no_cost_explorer: bool,
    region: str,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """What cluster NAME costs per hour now (what runs, found by its tags, at AWS's prices)
    and what it has cost so far (Cost Explorer, by the fmctl.dev/cluster tag). Read-only."""
    from provisioner.ops.cost_report import cost_of

    target = _target(region, state_dir, sandbox)
    found = cost_of(target, name, not no_cost_explorer)
    if found is None:
        if output == "json":
            click.echo(json.dumps({"cluster": name, "region": region, "error": "not found"}))
        else:
            click.echo(f"{name}: no resource tagged fmctl.dev/cluster={name} in {region}")
        sys.exit(1)
    data = found.as_data()
    if output == "json":
        click.echo(json.dumps(data, indent=2))
        return
    unpriced = [i for i in data["items"] if i["hourly"] is None]
    least = "at least " if unpriced else ""
    click.echo(f"{name} ({region}): {least}${data['hourly']:,.2f}/hour now")
    for item in data["items"]:
        if item["hourly"] is None:
            click.echo(f"  {item['description']:<40} unpriced ({item['unpriced']})")
        else:
            click.echo(
                f"  {item['description']:<40} ${item['hourly']:,.2f}/hour  [{item['source']}]"
            )
    if not data["items"]:
        click.echo("  nothing billed by the hour runs (storage and logs aside)")
    if found.budget is not None:
        click.echo(found.budget.line())
    idle = data["idle"]
    if idle is not None and not idle["gpuNodes"] and idle["hourly"] is None:
        click.echo(f"idle now: unknown ({idle['note']})")
    elif idle is not None:
        names = ", ".join(idle["idleNodes"][:6]) + (" ..." if len(idle["idleNodes"]) > 6 else "")
        head = f"idle now: {len(idle['idleNodes'])} of {idle['gpuNodes']} GPU nodes"
        if idle["hourly"] is None:
            price = "not priced"
        else:
            share = f"{idle['share']:.0%}" if idle["share"] is not None else "?"
            price = f"${idle['hourly']:,.2f}/hour, {share} of the hourly cost"
        click.echo(f"{head} ({price}; {idle['note']})" + (f": {names}" if names else ""))
    so_far = data["soFar"]
    if so_far is not None:
        if so_far["usd"] is None:
            click.echo(f"so far: unknown ({so_far['note']})")
        else:
            click.echo(f"so far: ${so_far['usd']:,.2f} since {so_far['since']} ({so_far['note']})")
