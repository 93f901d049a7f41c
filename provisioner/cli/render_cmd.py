"""`fmctl render -f FILE -o OUT`: the deployment folder, for review and GitOps."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from provisioner.cli.report import print_problems


@click.command("render")
@click.option("-f", "--file", "path", required=True, metavar="FILE", help="The cluster spec.")
@click.option(
    "-o",
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder to write (created; files fmctl wrote before and no "
    "longer makes are removed, others are left alone).",
)
@click.option(
    "--scheduler", type=click.Choice(["slurm", "kubernetes"]), help="Override the spec's scheduler."
)
def render(path: str, out: Path, scheduler: str | None) -> None:
    """Render ParallelCluster/Slurm configs or EKS/Kubernetes manifests, without credentials.

    The same spec always gives the same bytes. Values only known once `fmctl up` has created
    them appear as <fmctl:NAME> placeholders, listed in OUT/PLACEHOLDERS.md.
    """
    import os

    from provisioner.ops.render import render_to

    try:
        outcome = render_to(path, out, scheduler)
    except Exception as exc:  # a template bug, never the user's input: say so plainly
        if os.environ.get("FMCTL_DEBUG"):
            raise
        click.echo(
            f"fmctl: internal error while rendering {path}: {type(exc).__name__}: "
            f"{exc}\nhint: this is a bug in fmctl, not in your spec; please report it "
            "(FMCTL_DEBUG=1 shows the traceback)",
            err=True,
        )
        sys.exit(2)
    problems = outcome.validation
    print_problems(problems, sys.stderr, color=sys.stderr.isatty())
    if not problems.ok:
        sys.exit(1)
    pending = sorted({n for names in outcome.placeholders.values() for n in names})
    click.echo(
        f"wrote {len(outcome.written)} files to {out}"
        + (f", removed {len(outcome.removed)} stale" if outcome.removed else "")
    )
    if pending:
        click.echo(
            f"{len(pending)} placeholder(s) `fmctl up` fills: {', '.join(pending)} "
            f"(see {out / 'PLACEHOLDERS.md'})"
        )
