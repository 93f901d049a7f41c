"""`fmctl init`: print a commented starter spec for a scheduler and an instance type."""

from __future__ import annotations

import sys

import click

from provisioner.cli.options import target_options
from provisioner.spec.defaults import MAX_POOL_COUNT


@click.command("init")
@click.option("--scheduler", type=click.Choice(["slurm", "kubernetes"]), required=True)
@click.option(
    "--instance-type",
    "instance_type",
    required=True,
    metavar="TYPE",
    help="A GPU type from `fmctl catalog`, e.g. p5.48xlarge.",
)
@click.option(
    "--count",
    type=click.IntRange(min=1, max=MAX_POOL_COUNT),
    default=2,
    show_default=True,
    help="Number of GPU instances.",
)
@click.option("--name", default="llm-pretrain", show_default=True, help="Cluster name.")
@click.option("--region", default="us-east-1", show_default=True, help="AWS region.")
@click.option(
    "--provider",
    type=click.Choice(["parallelcluster", "pcs"]),
    default="parallelcluster",
    show_default=True,
    help="Who runs Slurm (--scheduler slurm): ParallelCluster or AWS PCS.",
)
@click.option(
    "--offline",
    is_flag=True,
    help="Do not ask EC2 which zone offers the type (the region's first zone is named).",
)
@target_options
def init(
    scheduler: str,
    instance_type: str,
    count: int,
    name: str,
    region: str,
    provider: str,
    offline: bool,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """Print a commented starter spec; redirect it to a file and edit. With AWS
    credentials (or --sandbox) its zone is one that offers the type."""
    from provisioner.catalog import load_catalog
    from provisioner.spec.problems import suggest
    from provisioner.spec.starter import starter_spec

    catalog = load_catalog()
    itype = catalog.get(instance_type)
    if itype is None or not itype.is_gpu:
        gpu_names = [t.name for t in catalog.types.values() if t.is_gpu]
        hint = suggest(instance_type, gpu_names) or "see `fmctl catalog`"
        reason = "unknown GPU instance type" if itype is None else "not a GPU instance type"
        click.echo(f"error: --instance-type: {reason} {instance_type!r}\nhint: {hint}", err=True)
        sys.exit(1)
    if itype.block_sizes and count not in itype.block_sizes:
        sizes = " or ".join(map(str, itype.block_sizes))
        click.echo(
            f"error: --count: {instance_type} runs on UltraServer Capacity Blocks of {sizes} "
            f"instances, not {count}\nhint: --count {itype.block_sizes[-1]}",
            err=True,
        )
        sys.exit(1)
    from provisioner.ops.target import home_of
    from provisioner.ops.zones import starter_zone

    block = itype.ultra_server  # an UltraServer's zone is its Capacity Block's
    choice = starter_zone(
        region, instance_type, sandbox, home_of(state_dir), not offline and not block
    )
    click.echo(
        starter_spec(
            scheduler=scheduler,
            itype=itype,
            count=count,
            name=name,
            region=region,
            provider=provider,
            zone=choice.zone,
            zone_note="" if block else choice.note,
        ),
        nl=False,
    )
