"""`fmctl check -f SPEC --from DIR`: judge what the node tools printed on a cluster's nodes
(GPUs, DCGM, EFA, NCCL) against the catalog, name the nodes to drain and replace."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from provisioner.cli.engine_cmds import GuardedCommand, _fail, _load

if TYPE_CHECKING:
    from provisioner.check.results import CheckReport

#: Checks that fail on a node itself: draining it is the remedy.
NODE_CHECKS = ("gpus", "dcgm", "efa")


@click.command("check", cls=GuardedCommand)
@click.option("-f", "--file", "path", required=True, help="The cluster spec (YAML).")
@click.option(
    "--from",
    "folder",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Results gathered on the nodes by slurm/lib/node-check.sh (and all_reduce_perf "
    "logs in nccl/POOL.txt).",
)
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
def check(path: str, folder: Path, output: str) -> None:
    """Per node and per pool, pass or fail with figures: GPU count and health (nvidia-smi,
    DCGM level 2), EFA devices (fi_info) and the NCCL all-reduce bus bandwidth against what
    the catalog's network figures predict. Exit 1 when anything failed."""
    from provisioner.catalog import load_catalog
    from provisioner.check.results import check_folder
    from provisioner.render.context import build_context

    spec = _load(path, None).resolved
    if not (folder / "nodes").is_dir():
        _fail(
            f"{folder}: no nodes/ folder of results",
            "run slurm/lib/node-check.sh on each node with this folder (shared storage) as "
            "its output, see `fmctl check --help`",
        )
    context = build_context(spec, load_catalog())
    report = check_folder(context, folder)
    if output == "json":
        click.echo(json.dumps(report.as_data(), indent=2))
    else:
        _print(report, context.scheduler)
    if not report.ok:
        sys.exit(1)


def _print(report: CheckReport, scheduler: str) -> None:
    for verdict in report.verdicts:
        mark = "ok" if verdict.ok else "FAILED"
        figures = "; ".join(
            f"{f.check} {f.figure}" + ("" if f.ok is not False else f" (expected {f.expected})")
            for f in verdict.findings
        )
        click.echo(f"{verdict.subject:<28} {verdict.pool:<12} {mark:<7} {figures}")
    for pool, (seen, total) in report.coverage.items():
        if seen < total:
            click.echo(
                f"pool {pool}: {seen} of {total} nodes reported (nodes busy with a job or "
                "down are not checked)"
            )
    failed = [v for v in report.verdicts if not v.ok]
    for verdict in failed:
        for finding in verdict.failed():
            click.echo(
                f"error: {verdict.subject}: {finding.check}: {finding.figure}, expected "
                f"{finding.expected}" + (f": {finding.detail}" if finding.detail else ""),
                err=True,
            )
        first = verdict.failed()[0].check
        if first in NODE_CHECKS:  # a node's own fault (not a pool's NCCL run, not a stray folder)
            click.echo(f"hint: {_drain(verdict.subject, first, scheduler)}", err=True)
    click.echo(
        f"{len(report.verdicts) - len(failed)} passed, {len(failed)} failed"
        + ("" if failed else ": fit for a training run")
    )


def _drain(node: str, check: str, scheduler: str) -> str:
    """How to take a failed node out of service, for the scheduler it runs under."""
    if scheduler == "slurm":
        return (
            f'drain and replace it: scontrol update nodename={node} state=drain reason="fmctl '
            f'check: {check}" (ParallelCluster replaces a drained static node)'
        )
    return (
        f"drain and replace it: kubectl cordon {node} && kubectl drain {node} "
        "--ignore-daemonsets --delete-emptydir-data, then terminate the instance (the node "
        "group launches a new one)"
    )
