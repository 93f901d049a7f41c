"""`fmctl gc`: tear down test clusters that outlived their ttl or an age limit."""

from __future__ import annotations

import sys
import time

import click

from provisioner.cli.engine_cmds import GuardedCommand, _fail, _report, _target
from provisioner.cli.options import region_option, state_option, target_options


@click.command("gc", cls=GuardedCommand)
@click.option("--expired", is_flag=True, help="Clusters whose metadata.ttl has passed.")
@click.option("--older-than", metavar="AGE", help="Clusters created longer ago, e.g. 6h or 2d.")
@click.option("--dry-run", is_flag=True, help="List what would go; change nothing.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@region_option
@state_option
@target_options
def gc(
    expired: bool,
    older_than: str | None,
    dry_run: bool,
    yes: bool,
    region: str,
    state_url: str | None,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """Find every fmctl cluster in the region by tag and tear down those matched (never one
    a run holds the lock of)."""
    from provisioner.cli.progress import Progress
    from provisioner.ops.engine import down
    from provisioner.ops.errors import LockHeld
    from provisioner.ops.gc import find_clusters, lock_holder, parse_age, select

    if not expired and older_than is None:
        _fail("say which clusters to collect", "pass --expired, --older-than AGE, or both")
    limit = None
    if older_than is not None:
        limit = parse_age(older_than)
        if limit is None:
            _fail(f"--older-than {older_than!r} is not a duration", "write it like 6h or 2d")
    target = _target(region, state_dir, sandbox, state_url)
    seen = find_clusters(target.aws())
    chosen = select(seen, expired, limit)
    held = {c.name: who for c in chosen if (who := lock_holder(target, c.name))}
    for name, who in held.items():
        click.echo(f"skip {name}: locked by {who}", err=True)
    chosen = [c for c in chosen if c.name not in held]
    now = time.time()
    for cluster in sorted(seen.values(), key=lambda c: c.name):
        mark = "collect" if cluster in chosen else "locked" if cluster.name in held else "keep"
        age = f"{(now - cluster.created_at) / 3600:.1f}h old" if cluster.created_at else "age ?"
        ttl = ("expired" if cluster.expired(now) else "ttl ok") if cluster.expires_at else "no ttl"
        click.echo(f"  {mark:<8} {cluster.name:<40} {cluster.resources:>3} resources, {age}, {ttl}")
    if not chosen or dry_run:
        click.echo(f"{len(chosen)} cluster(s) to collect" + (" (dry run)" if dry_run else ""))
        return
    if not yes:
        if not sys.stdin.isatty():
            _fail("`gc` asks before deleting", "pass --yes to run without asking")
        click.confirm(f"tear down {len(chosen)} cluster(s)?", abort=True)
    for cluster in chosen:
        click.echo(f"down {cluster.name}:")
        try:
            result, found = down(cluster.name, target, Progress())
        except LockHeld as exc:  # a run took the lock since the listing
            click.echo(f"skip {cluster.name}: {exc}", err=True)
            continue
        _report(result, f"down {cluster.name}")
        click.echo(f"{cluster.name}: {len(found)} resources deleted")
