"""`fmctl logs NAME [--since 1h] [--source ...] [--stream S] [--failure] [--export DIR]`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from provisioner.cli.common import GuardedCommand, _fail, _target
from provisioner.cli.options import name_argument, output_option, region_option, target_options


@click.command("logs", cls=GuardedCommand)
@name_argument()
@click.option("--since", default="1h", show_default=True, help="How far back: 30m, 6h, 2d.")
@click.option(
    "--source",
    type=click.Choice(["all", "fmctl", "cluster"]),
    default="all",
    show_default=True,
    help="fmctl's own events, the cluster's CloudWatch logs (EKS control plane, "
    "ParallelCluster nodes), or both.",
)
@click.option("--stream", metavar="TEXT", help="Only CloudWatch streams whose name holds TEXT.")
@click.option("--limit", default=200, show_default=True, help="Newest lines per log group.")
@click.option(
    "--failure",
    is_flag=True,
    help="Why a ParallelCluster create failed: the head node's cfn-init, chef-client and "
    "cloud-init-output streams, and what fmctl saw fail.",
)
@click.option(
    "--export",
    "folder",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write every line to DIR, one file per source, instead of printing.",
)
@output_option
@region_option
@target_options
def logs(
    name: str,
    since: str,
    source: str,
    stream: str | None,
    limit: int,
    failure: bool,
    folder: Path | None,
    output: str,
    region: str,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """fmctl's event log and the cluster's CloudWatch logs, time-ordered (read-only)."""
    from provisioner.ops import logs as ops_logs

    seconds = ops_logs.parse_since(since)
    if seconds is None:
        _fail(f"--since {since!r} is not a duration", "write it like 30m, 6h or 2d")
    start = time.time() - seconds
    target = _target(region, state_dir, sandbox)
    lines: list[ops_logs.LogLine] = []
    if source in ("all", "fmctl"):
        events = ops_logs.fmctl_events(target.home, name, start)
        lines += [e for e in events if e.text.split()[1:2] == ["failed"]] if failure else events
    groups = ops_logs.cluster_groups(target, name) if source in ("all", "cluster") else []
    for group in groups:
        if failure:
            if group.startswith("/aws/parallelcluster/"):
                for found in ops_logs.failure_streams(target, group):
                    lines += ops_logs.stream_tail(target, group, found, 40)
        else:
            lines += ops_logs.group_events(target, group, start, stream, limit)
    lines.sort(key=lambda line: line.at)
    if folder is not None:
        written = ops_logs.export(lines, folder)
        click.echo(f"{name}: {len(lines)} lines from {len(written)} sources written to {folder}")
        return
    if output == "json":
        for line in lines:
            sys.stdout.write(json.dumps(line.as_data()) + "\n")
        return
    if not lines:
        where = ", ".join(groups) if groups else "no log groups of the cluster"
        click.echo(f"{name}: nothing in the last {since} ({where}; fmctl's events on this machine)")
        return
    for line in lines:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(line.at))
        click.echo(f"{at}  {line.source}  {line.text}")
