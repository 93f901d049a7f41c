"""`fmctl validate -f FILE`: offline checks with located errors."""

from __future__ import annotations

import sys

import click

from provisioner.cli.report import dump_json, print_problems, problems_json, use_color


@click.command("validate")
@click.option(
    "-f",
    "--file",
    "path",
    required=True,
    metavar="FILE",
    help="The cluster spec (YAML); '-' reads standard input.",
)
@click.option(
    "--scheduler", type=click.Choice(["slurm", "kubernetes"]), help="Override the spec's scheduler."
)
@click.option("--show-defaults", is_flag=True, help="Print the spec with every default filled in.")
@click.option(
    "-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def validate(path: str, scheduler: str | None, show_defaults: bool, output: str) -> None:
    """Check a spec without credentials; every problem at once, located in the file.

    Exit status 0 when the spec is valid (warnings allowed), 1 when it has errors.
    """
    from provisioner.ops.validate import load_and_validate

    result = load_and_validate(path, scheduler)
    if output == "json":
        data = problems_json(result)
        if show_defaults and result.resolved is not None:
            data["spec"] = result.resolved.model_dump(mode="json", by_alias=True, exclude_none=True)
        click.echo(dump_json(data))
    else:
        print_problems(result, sys.stderr, color=use_color(sys.stderr))
        if result.ok and show_defaults and result.resolved is not None:
            from provisioner.spec.dump import dump_spec_yaml

            click.echo(dump_spec_yaml(result.resolved), nl=False)
        elif result.ok:
            spec = result.resolved
            assert spec is not None
            nodes = sum(p.count for p in spec.compute.gpu_pools)
            click.echo(
                f"{result.doc.name}: valid ({spec.scheduler}, "
                f"{len(spec.compute.gpu_pools)} GPU pool(s), {nodes} GPU node(s))"
            )
    sys.exit(0 if result.ok else 1)
