"""Entry point: a click group whose commands are imported only when they run.

``fmctl --help`` must start in well under 0.15 s, so the group lists commands from the static
table below (name, module, one-line help) instead of importing every command module.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from provisioner import __version__

#: name -> (module under provisioner.cli, attribute, one-line help). Order is help order.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "init": ("init_cmd", "init", "Print a commented starter spec."),
    "validate": ("validate_cmd", "validate", "Check a spec offline; errors point into the file."),
    "render": ("render_cmd", "render", "Write the deployment folder (configs, manifests)."),
    "plan": ("engine_cmds", "plan", "Show what `up` would create, in which order, in parallel."),
    "up": ("engine_cmds", "up", "Create the cluster (re-running creates only what is missing)."),
    "list": ("list_cmd", "list_", "List the clusters fmctl owns in a region, from AWS tags."),
    "status": ("cluster_cmds", "status", "Show a cluster's resources, from AWS tags."),
    "cost": ("cost_cmd", "cost", "What a cluster costs per hour now, and has cost so far."),
    "topology": (
        "cluster_cmds",
        "topology",
        "Publish where a Slurm cluster's nodes sit in the network (topology.conf).",
    ),
    "down": ("cluster_cmds", "down", "Delete everything a cluster owns, dependents first."),
    "kubeconfig": (
        "kube_cmds",
        "kubeconfig",
        "Write (or print) an EKS cluster's kubeconfig entry.",
    ),
    "connect": (
        "connect_cmd",
        "connect",
        "A shell on a cluster's head node or a node (SSM or SSH), or Grafana forwarded.",
    ),
    "logs": ("logs_cmd", "logs", "Show fmctl's events and the cluster's AWS logs."),
    "token": ("kube_cmds", "token", "Print a token for an EKS cluster's API (kubectl runs it)."),
    "history": ("state_cmds", "history", "Show who changed a cluster, when, and what changed."),
    "unlock": ("state_cmds", "unlock", "Show a cluster's lock holder and remove its lock."),
    "state": ("state_cmds", "state", "Set up team state in S3; move a cluster's state there."),
    "gc": ("gc_cmd", "gc", "Tear down expired or old clusters (for test clusters)."),
    "sandbox": ("cluster_cmds", "sandbox", "Manage the local AWS emulator behind --sandbox."),
    "setup": ("setup_cmd", "setup", "Install the tools fmctl drives (ParallelCluster)."),
    "estimate": (
        "estimate_cmd",
        "estimate",
        "Where a training step's time goes on the spec's cluster (memory, compute, network).",
    ),
    "check": (
        "check_cmd",
        "check",
        "Judge what GPU, DCGM, EFA and NCCL tools said on the nodes: which to drain.",
    ),
    "health": (
        "health_cmd",
        "health",
        "Show each GPU node's place in the health loop and each pool's repair budget.",
    ),
    "catalog": ("catalog_cmd", "catalog", "Show the accelerated instance types fmctl knows."),
    "permissions": (
        "permissions_cmd",
        "permissions",
        "Print the IAM policies that let a person or role run fmctl.",
    ),
    "schema": ("schema_cmd", "schema", "Print the JSON Schema of the spec (for editors)."),
    "completion": ("completion_cmd", "completion", "Print the shell completion script."),
}


class LazyGroup(click.Group):
    """A group that imports a command's module only when that command is invoked."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module = importlib.import_module(f"provisioner.cli.{entry[0]}")
        command: click.Command = getattr(module, entry[1])
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMANDS:
            import difflib

            close = difflib.get_close_matches(name, list(COMMANDS), n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            ctx.fail(f"No such command '{name}'.{hint}")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, entry[2]) for name, entry in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="fmctl")
def cli() -> None:
    """fmctl: GPU clusters for foundation-model training on AWS.

    One spec becomes a Slurm cluster (AWS ParallelCluster) or a Kubernetes cluster (Amazon
    EKS) with EFA, FSx for Lustre, and Prometheus + Grafana. Start with `fmctl init`.
    """


def _no_plugin_loader() -> None:
    """With every plugin disabled, pydantic's loader answers "no plugins" without reading
    entry points, but importing it still imports importlib.metadata (with email, zipfile
    and csv): 20 ms of each command's 250. Stand in a loader that gives that same answer."""
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") != "__all__":
        return
    name = "pydantic.plugin._loader"
    if name not in sys.modules:
        import types

        loader = types.ModuleType(name)
        loader.get_plugins = tuple  # type: ignore[attr-defined]  # () : no plugins
        sys.modules[name] = loader


#: Commands that a second run resumes where an interrupted one stopped.
RESUMABLE = ("up", "down", "gc")


def main(argv: list[str] | None = None) -> Any:
    """Console-script entry point: click's own error handling, except that Ctrl-C exits 130
    and says whether running again resumes, a declined prompt says nothing changed, and a
    closed pipe (``fmctl ... | head``) ends quietly."""
    # pydantic looks for third-party plugins through package entry points on first use,
    # which costs more start-up than validating a spec; fmctl uses none.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    _no_plugin_loader()
    args = sys.argv[1:] if argv is None else argv
    try:
        code = cli.main(args=args, prog_name="fmctl", standalone_mode=False)
    except click.exceptions.Abort as abort:
        if isinstance(abort.__cause__, KeyboardInterrupt):
            _interrupted(args)
        # click.confirm(abort=True) answered no (or its input ended).
        click.echo("nothing changed", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        _interrupted(args)
    except click.exceptions.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        _quiet_pipe()
    sys.exit(code if isinstance(code, int) else 0)


def _interrupted(args: list[str]) -> None:
    """Ctrl-C: exit 130 (128 + SIGINT, as shells report it)."""
    verb = next((a for a in args if not a.startswith("-")), "")
    if verb in RESUMABLE:
        click.echo(f"interrupted: `fmctl {verb}` again resumes where this stopped", err=True)
    else:
        click.echo("interrupted", err=True)
    sys.exit(130)


def _quiet_pipe() -> None:
    """The reader went away: nothing more to say to it, and no traceback at exit when
    Python flushes standard output (its documented way, "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(141)  # 128 + SIGPIPE, as a tool killed by the signal reports it
