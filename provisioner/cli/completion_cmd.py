"""`fmctl completion SHELL`: the shell's completion script for fmctl (click's own)."""

from __future__ import annotations

import click


@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print SHELL's completion script. Load it with, for bash:
    eval "$(fmctl completion bash)" (in ~/.bashrc); zsh: the same in ~/.zshrc;
    fish: fmctl completion fish > ~/.config/fish/completions/fmctl.fish."""
    from click.shell_completion import get_completion_class

    from provisioner.cli.main import cli

    kind = get_completion_class(shell)
    assert kind is not None  # click ships bash, zsh and fish
    # The script calls fmctl back with _FMCTL_COMPLETE set; click's main answers it.
    click.echo(kind(cli, {}, "fmctl", "_FMCTL_COMPLETE").source())
