"""`fmctl schema`: the JSON Schema of the spec, for editors (yaml-language-server)."""

from __future__ import annotations

import click


@click.command("schema")
def schema() -> None:
    """Print the JSON Schema of the cluster spec.

    Save it and point your editor at it, e.g. with a first line
    `# yaml-language-server: $schema=./fmctl.schema.json`.
    """
    from provisioner.cli.report import dump_json
    from provisioner.spec.schema import spec_json_schema

    click.echo(dump_json(spec_json_schema()))
