"""`fmctl state init|push|pull`, `fmctl unlock`, `fmctl history`: team state in S3."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from provisioner.cli.common import GuardedCommand, _fail, _target, fail_with
from provisioner.cli.options import name_argument, region_option, state_option, target_options


def _location(url: str | None) -> Any:
    from provisioner.ops.errors import BadStateUrl
    from provisioner.ops.team import parse_state_url

    if not url:
        _fail("say where the state lives", "pass --state s3://BUCKET/PREFIX or set FMCTL_STATE")
    try:
        location = parse_state_url(url)
    except BadStateUrl as exc:
        fail_with(exc)
    if location.local:
        _fail("the state location must be s3://BUCKET/PREFIX here")
    return location


@click.group("state")
def state() -> None:
    """Team state in S3: set up the bucket, move a cluster's state there and back."""


@state.command("init", cls=GuardedCommand)
@click.argument("url")
@region_option
@target_options
def state_init(url: str, region: str, sandbox: bool, state_dir: str | None) -> None:
    """Create the state bucket of URL (s3://BUCKET/PREFIX): versioned, encrypted, public
    access blocked, TLS only. Safe to run again."""
    from provisioner.ops.team import init_bucket

    location = _location(url)
    target = _target(region, state_dir, sandbox)
    report = init_bucket(target, location)
    for line in report.lines:
        click.echo(line)


def _move_command(verb: str, doc: str, done: str, marked: str) -> None:
    """`fmctl state push|pull NAME`: the same options, ops.team's function of that name."""

    @state.command(verb, cls=GuardedCommand, help=doc)
    @name_argument()
    @region_option
    @state_option
    @target_options
    def command(
        name: str, region: str, state_url: str | None, sandbox: bool, state_dir: str | None
    ) -> None:
        from provisioner.ops import team

        location = _location(state_url)
        target = _target(region, state_dir, sandbox)
        moved = getattr(team, verb)(target, name, location)
        click.echo(f"{name}: {', '.join(moved.copied)} {done.format(url=state_url)}")
        if moved.marked:
            click.echo(f"{name}: {marked.format(count=moved.marked, url=state_url)}")


_move_command(
    "push",
    "Move this machine's state of cluster NAME to --state (FMCTL_STATE).",
    "moved to {url}; runs here use it from now on",
    "{count} of its VPC and security groups now say so (fmctl.dev/state): a run from any "
    "machine takes the lock there",
)
_move_command(
    "pull",
    "Copy cluster NAME's state from --state (FMCTL_STATE) to this machine, and use it.",
    "copied here; runs here use the local state now",
    "fmctl.dev/state taken off {count} of its VPC and security groups",
)


@click.command("unlock", cls=GuardedCommand)
@name_argument()
@click.option("--force", is_flag=True, help="Do not ask.")
@region_option
@state_option
@target_options
def unlock(
    name: str,
    force: bool,
    region: str,
    state_url: str | None,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """Show who holds cluster NAME's lock, and remove it (asks first)."""
    from provisioner.ops.team import caller, open_state, process_gone

    target = _target(region, state_dir, sandbox, state_url)
    cluster = open_state(target, name)
    seen = cluster.peek_lock()
    if seen is None:
        click.echo(f"{name}: not locked ({cluster.backend.where})")
        return
    who = seen.who
    if seen.remaining_s is None:
        _fail(
            f"{name} is locked by {who}, a live process on this machine",
            "a local lock ends with its process: let it finish, or stop that process",
        )
    lease = (
        f"its lease ended {-seen.remaining_s:.0f} s ago"
        if seen.remaining_s <= 0
        else f"its lease runs {seen.remaining_s:.0f} s more"
    )
    click.echo(f"{name} is locked by {who}; {lease}")
    gone = seen.holder is not None and process_gone(seen.holder)
    if gone and seen.holder is not None:
        # Its own host, and no such process: the run is over for certain, nobody to ask.
        click.echo(f"{name}: that run's process (pid {seen.holder.pid}) no longer exists here")
    elif not force:
        if not sys.stdin.isatty():
            _fail("`unlock` asks first", "pass --force to remove the lock without asking")
        if not click.confirm("remove the lock (only if that run is gone for good)?"):
            _fail("nothing changed")
    if not cluster.break_lock(seen, caller(target)):
        _fail(
            "the lock changed while you looked (renewed or taken): it was left alone",
            f"run `fmctl unlock {name}` again to see who holds it now",
        )
    click.echo(
        f"{name}: lock removed; `fmctl history {name}` records that run as ended by this "
        "unlock" + ("" if gone else "; if it still runs, it stops at its next renewal")
    )


@click.command("history", cls=GuardedCommand)
@name_argument()
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@region_option
@state_option
@target_options
def history(
    name: str,
    output: str,
    region: str,
    state_url: str | None,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """Every `up` and `down` of cluster NAME: who, when, what changed, the result."""
    from provisioner.ops.team import history as read_history

    target = _target(region, state_dir, sandbox, state_url)
    entries = read_history(target, name)
    if output == "json":
        click.echo(json.dumps([e.as_data() for e in entries], indent=2))
        return
    if not entries:
        click.echo(f"{name}: no recorded runs")
        return
    for e in entries:
        data = e.as_data()
        took = f", took over from {e.took_over}" if e.took_over else ""
        took += f", lock removed by {e.ended_by}" if e.ended_by else ""
        click.echo(
            f"{data['started']}  {e.command:<5} {e.result:<8} {e.who} on {e.host} "
            f"(pid {e.pid}, run {e.run}){took}"
        )
        for line in e.changes[:20]:
            click.echo(f"    {line}")
        if len(e.changes) > 20:
            click.echo(f"    … and {len(e.changes) - 20} more")
