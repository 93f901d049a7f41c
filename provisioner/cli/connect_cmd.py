"""`fmctl connect NAME [NODE | --head | --login] [--port-forward PORT] [--print]`."""

from __future__ import annotations

import click

from provisioner.cli.common import GuardedCommand, _fail, _target
from provisioner.cli.options import name_argument, region_option, target_options


@click.command("connect", cls=GuardedCommand)
@name_argument()
@click.argument("node", required=False)
@click.option("--head", is_flag=True, help="The Slurm head node (the default on Slurm).")
@click.option("--login", is_flag=True, help="A Slurm login node.")
@click.option(
    "--port-forward",
    "forward",
    type=click.IntRange(1, 65535),
    metavar="PORT",
    help="Forward localhost:PORT instead of a shell: Grafana (3000) without NODE, else "
    "that port of NODE.",
)
@click.option("--print", "print_only", is_flag=True, help="Print the command; run nothing.")
@region_option
@target_options
def connect(
    name: str,
    node: str | None,
    head: bool,
    login: bool,
    forward: int | None,
    print_only: bool,
    region: str,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """A shell on cluster NAME's head node or on NODE (SSM Session Manager, or SSH where the
    spec gives a key pair and sshCidr), or Grafana forwarded to localhost."""
    import os
    import shlex
    import shutil

    from provisioner.ops.connect import connection
    from provisioner.ops.team import applied_spec

    if sum((head, login, node is not None)) > 1:
        _fail("name one of NODE, --head and --login", f"e.g. `fmctl connect {name} --head`")
    target = _target(region, state_dir, sandbox)
    found = connection(target, name, node, head, login, forward, applied_spec(target, name))
    line = shlex.join(found.argv)
    if print_only:
        click.echo(line)
        return
    tool = found.argv[0]
    if shutil.which(tool) is None:
        _fail(f"`{tool}` is not on PATH", f"install it, or run it yourself: {line}")
    if tool == "aws" and shutil.which("session-manager-plugin") is None:
        _fail(
            "`aws ssm start-session` needs the Session Manager plugin, and it is not on PATH",
            "install it (AWS Systems Manager User Guide: 'Install the Session Manager plugin "
            f"for the AWS CLI'), then run: {line}",
        )
    click.echo(f"connecting to {found.reaches}: {line}", err=True)
    os.execvp(tool, list(found.argv))
