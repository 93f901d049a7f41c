"""`fmctl render -f FILE -o OUT [--from-cluster]`: the deployment folder, for review and
GitOps."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from provisioner.cli.options import target_options
from provisioner.cli.report import print_problems, use_color


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
@click.option(
    "--from-cluster",
    is_flag=True,
    help="Fill every placeholder with the live cluster's values (read-only; found by tag), "
    "so the folder can be committed as it is.",
)
@target_options
def render(
    path: str,
    out: Path,
    scheduler: str | None,
    from_cluster: bool,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """Render ParallelCluster/Slurm configs or EKS/Kubernetes manifests, without credentials.

    The same spec always gives the same bytes. Values only known once `fmctl up` has created
    them appear as <fmctl:NAME> placeholders, listed in OUT/PLACEHOLDERS.md; --from-cluster
    reads them from the cluster instead (credentials needed, nothing is changed).
    """
    import os

    from provisioner.ops.render import render_to

    target_of = None
    if from_cluster:
        from provisioner.cli.common import _target

        def target_of(spec: Any) -> Any:
            return _target(spec.metadata.region, state_dir, sandbox)

    try:
        outcome = render_to(path, out, scheduler, target_of)
    except Exception as exc:
        if os.environ.get("FMCTL_DEBUG"):
            raise
        from provisioner.cli.common import fail_with

        fail_with(_render_failure(exc, path))
    problems = outcome.validation
    print_problems(problems, sys.stderr, color=use_color(sys.stderr))
    if not problems.ok:
        sys.exit(1)
    pending = sorted({n for names in outcome.placeholders.values() for n in names})
    click.echo(
        f"wrote {len(outcome.written)} files to {out}"
        + (f", removed {len(outcome.removed)} stale" if outcome.removed else "")
    )
    if outcome.filled:
        click.echo(
            f"filled {outcome.filled} value(s) from the live cluster (see "
            f"{out / 'PLACEHOLDERS.md'}): the folder holds no placeholder"
        )
    for rid in outcome.pending:
        click.echo(
            f"note: {rid} differs from the spec (`fmctl plan` shows how); its id is the live one",
            err=True,
        )
    if pending:
        click.echo(
            f"{len(pending)} placeholder(s) `fmctl up` fills: {', '.join(pending)} "
            f"(see {out / 'PLACEHOLDERS.md'}; --from-cluster fills them from the live cluster)"
        )


def _render_failure(exc: Exception, path: str) -> Any:
    """What stopped `render`, as one of fmctl's errors: the live cluster could not fill the
    placeholders (an AWS error: nothing was written), or anything else, which is a bug in
    fmctl's templates, never in the spec."""
    from provisioner.ops.errors import AwsError, FmctlBug, FmctlError, as_error

    if isinstance(exc, AwsError):
        return as_error(exc, "fmctl render --from-cluster")
    if isinstance(exc, FmctlError):
        return exc
    return FmctlBug(f"internal error while rendering {path}: {type(exc).__name__}: {exc}")
