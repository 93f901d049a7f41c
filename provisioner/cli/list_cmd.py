"""`fmctl list`: the clusters fmctl owns, from tags alone."""

from __future__ import annotations

import dataclasses
import json
import time

import click

from provisioner.cli.common import GuardedCommand, _target, reading_regions
from provisioner.cli.options import region_option, target_options


def _age(seconds: float) -> str:
    """A short age: 45m, 7h, 3d."""
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h"
    return f"{int(seconds // 86400)}d"


@click.command("list", cls=GuardedCommand)
@click.option("--all-regions", is_flag=True, help="Every region fmctl accepts, not just one.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@region_option
@target_options
def list_(
    all_regions: bool, output: str, region: str, sandbox: bool, state_dir: str | None
) -> None:
    """Every cluster fmctl owns in the region: name, scheduler, state, age and expiry, read
    from AWS's tags (no local state needed: a teammate's clusters show too)."""
    from provisioner.catalog.regions import REGIONS
    from provisioner.ops.listing import list_clusters

    target = _target(region, state_dir, sandbox)
    regions = REGIONS if all_regions else (region,)
    with reading_regions(regions, all_regions):
        rows = list_clusters(lambda r: dataclasses.replace(target, region=r).aws(), regions)
    now = time.time()
    if output == "json":
        click.echo(json.dumps([row.as_data(now) for row in rows], indent=2))
        return
    if not rows:
        where = "any region fmctl accepts" if all_regions else region
        click.echo(f"no fmctl cluster in {where}")
        return
    click.echo(f"{'NAME':<40} {'REGION':<15} {'SCHEDULER':<24} {'STATE':<16} AGE   EXPIRES")
    for row in rows:
        age = _age(now - row.created_at) if row.created_at else "?"
        if row.expires_at is None:
            expires = "never"
        elif row.expires_at <= now:
            expires = "expired"
        else:
            expires = f"in {_age(row.expires_at - now)}"
        kind = f"{row.scheduler} ({row.provider})"
        click.echo(f"{row.name:<40} {row.region:<15} {kind:<24} {row.state:<16} {age:<5} {expires}")
