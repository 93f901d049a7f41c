"""`fmctl gc`: tear down test clusters that outlived their ttl or an age limit."""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from provisioner.ops.gc import ClusterSeen

from provisioner.cli import jsonout
from provisioner.cli.common import (
    GuardedCommand,
    _fail,
    _failures,
    _report,
    _target,
    reading_regions,
)
from provisioner.cli.options import output_option, region_option, state_option, target_options


@click.command("gc", cls=GuardedCommand)
@click.option("--expired", is_flag=True, help="Clusters whose metadata.ttl has passed.")
@click.option("--older-than", metavar="AGE", help="Clusters created longer ago, e.g. 6h or 2d.")
@click.option(
    "--ignore-ttl",
    is_flag=True,
    help="With --older-than: collect by age even a cluster whose ttl has not passed.",
)
@click.option(
    "--tag",
    "tag_filters",
    multiple=True,
    metavar="KEY=VALUE",
    help="Only clusters whose resources carry this tag (repeatable; e.g. team=research).",
)
@click.option(
    "--owner",
    metavar="NAME",
    help="Only clusters whose resources carry owner=NAME (metadata.tags: {owner: NAME}); "
    "the same as --tag owner=NAME.",
)
@click.option("--all-regions", is_flag=True, help="Every region fmctl accepts, not just one.")
@click.option("--dry-run", is_flag=True, help="List what would go; change nothing.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@output_option
@region_option
@state_option
@target_options
def gc(
    expired: bool,
    older_than: str | None,
    ignore_ttl: bool,
    tag_filters: tuple[str, ...],
    owner: str | None,
    all_regions: bool,
    dry_run: bool,
    yes: bool,
    output: str,
    region: str,
    state_url: str | None,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """Find every fmctl cluster in the region by tag and tear down those matched (never one
    a run holds the lock of)."""
    from provisioner.catalog.regions import REGIONS
    from provisioner.cli.progress import Progress
    from provisioner.ops.engine import down, owned_by
    from provisioner.ops.errors import LockHeld
    from provisioner.ops.gc import (
        find_everywhere,
        lock_holder,
        parse_age,
        select,
    )
    from provisioner.ops.kubeconfig import forget_locally
    from provisioner.ops.teardown import data_notes

    if not expired and older_than is None:
        _fail("say which clusters to collect", "pass --expired, --older-than AGE, or both")
    limit = None
    if older_than is not None:
        limit = parse_age(older_than)
        if limit is None:
            _fail(f"--older-than {older_than!r} is not a duration", "write it like 6h or 2d")
    tags = []
    for text in tag_filters:
        key, sep, value = text.partition("=")
        if not sep or not key:
            _fail(f"--tag {text!r} is not KEY=VALUE", "write it like --tag team=research")
        tags.append((key, value))
    if owner is not None:
        tags.append(("owner", owner))
    target = _target(region, state_dir, sandbox, state_url)
    regions = REGIONS if all_regions else (region,)
    targets = {r: dataclasses.replace(target, region=r) for r in regions}
    with reading_regions(regions, all_regions):
        seen = find_everywhere(lambda r: targets[r].aws(), regions)
    chosen = select(seen, expired, limit, ignore_ttl=ignore_ttl, tags=tuple(tags))
    held = {
        (c.region, c.name): who for c in chosen if (who := lock_holder(targets[c.region], c.name))
    }
    as_json = output == "json"
    for (where, name), who in held.items():
        place = f" ({where})" if all_regions else ""
        click.echo(f"skip {name}{place}: locked by {who}", err=True)
    chosen = [c for c in chosen if (c.region, c.name) not in held]
    now = time.time()
    # What `down` will find and delete, by the same reads (every kind's find_owned): the
    # count listed is the count deleted. Clusters kept are counted by their tags alone.
    owned = {(c.region, c.name): owned_by(targets[c.region], c.name) for c in chosen}
    marks = {}
    for cluster in sorted(seen.values(), key=lambda c: (c.region, c.name)):
        at = (cluster.region, cluster.name)
        mark = "collect" if cluster in chosen else "locked" if at in held else "keep"
        marks[at] = mark
        age = f"{(now - cluster.created_at) / 3600:.1f}h old" if cluster.created_at else "age ?"
        ttl = ("expired" if cluster.expired(now) else "ttl ok") if cluster.expires_at else "no ttl"
        where = f" ({cluster.region})" if all_regions else ""
        count = (
            f"{len(owned[at]):>3} resources" if at in owned else f"{cluster.resources:>3} tagged"
        )
        why = f": {_reason(cluster, expired, older_than, ignore_ttl, now)}" if at in owned else ""
        click.echo(f"  {mark:<8} {cluster.name:<40} {count}, {age}, {ttl}{where}{why}", err=as_json)
    seen_data = [
        {"cluster": c.name, "region": c.region, "action": marks[(c.region, c.name)]}
        for c in sorted(seen.values(), key=lambda c: (c.region, c.name))
    ]
    if not chosen or dry_run:
        click.echo(
            f"{len(chosen)} cluster(s) to collect" + (" (dry run)" if dry_run else ""),
            err=as_json,
        )
        if as_json:
            jsonout.line({"summary": {"ok": True, "dry_run": dry_run, "clusters": seen_data}})
        return
    # As `down` says it, with --yes too: the data a teardown cannot give back.
    for cluster in chosen:
        for line in data_notes(targets[cluster.region], owned[(cluster.region, cluster.name)]):
            click.echo(f"warning: {cluster.name}: {line}", err=True)
    if not yes:
        if as_json or not sys.stdin.isatty():
            _fail("`gc` asks before deleting", "pass --yes to run without asking")
        click.confirm(f"tear down {len(chosen)} cluster(s)?", abort=True)
    collected = []
    ok = True
    for cluster in chosen:
        click.echo(f"down {cluster.name}:", err=as_json)
        progress = jsonout.JsonEvents() if as_json else Progress()
        try:
            result, found = down(cluster.name, targets[cluster.region], progress)
        except LockHeld as exc:  # a run took the lock since the listing
            click.echo(f"skip {cluster.name}: {exc}", err=True)
            continue
        finally:
            progress.close()
        done = _report(result, f"down {cluster.name}", exit=not as_json)
        ok = ok and done
        # gc is down: what down leaves of a cluster on this machine goes too.
        local = forget_locally(targets[cluster.region], cluster.name, False) if done else []
        collected.append(
            {
                "cluster": cluster.name,
                "region": cluster.region,
                "ok": done,
                "deleted": len(found),
                "local": local,
                **_failures(result),
            }
        )
        click.echo(f"{cluster.name}: {len(found)} resources deleted", err=as_json)
        for line in local:
            click.echo(f"{cluster.name}: {line}", err=as_json)
    if as_json:
        jsonout.line({"summary": {"ok": ok, "clusters": seen_data, "collected": collected}})
        if not ok:
            sys.exit(1)


def _reason(
    cluster: ClusterSeen, expired: bool, older_than: str | None, ignore_ttl: bool, now: float
) -> str:
    """Why gc collects ``cluster``: its ttl passed, or its age (saying when its ttl is
    ignored to do so)."""
    if expired and cluster.expired(now):
        return "its ttl has passed"
    if ignore_ttl and cluster.expires_at is not None and not cluster.expired(now):
        return f"older than {older_than} (its ttl, not passed, is ignored: --ignore-ttl)"
    return f"older than {older_than}"
