"""`fmctl estimate`: where a training step's time goes on the spec's cluster (catalog only)."""

from __future__ import annotations

import json
import sys

import click

from provisioner.cli.common import GuardedCommand, _load, fail_with
from provisioner.ops.estimate import MODEL_NAMES


def _tokens(text: str) -> float:
    """1e12, 15T, 500B."""
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
    try:
        if text[-1:].upper() in scale:
            return float(text[:-1]) * scale[text[-1:].upper()]
        return float(text)
    except ValueError as exc:
        raise click.BadParameter(f"{text!r}: write e.g. 15T, 500B or 1e12") from exc


@click.command("estimate", cls=GuardedCommand)
@click.option("-f", "--file", "path", required=True, help="The cluster spec (YAML).")
@click.option("--model", type=click.Choice(MODEL_NAMES), required=True)
@click.option("--seq", type=click.IntRange(1), default=8192, show_default=True)
@click.option(
    "--global-batch",
    type=click.IntRange(1),
    default=1024,
    show_default=True,
    help="Sequences per optimizer step.",
)
@click.option("--precision", type=click.Choice(["bf16", "fp8"]), default="bf16", show_default=True)
@click.option(
    "--parallel",
    default="fsdp",
    show_default=True,
    help="fsdp, or tp=N,pp=N[,dp=N][,zero=0-3][,mb=B].",
)
@click.option(
    "--compute-efficiency",
    "--mfu",
    "compute_efficiency",
    type=click.FloatRange(0.01, 1.0),
    default=0.4,
    show_default=True,
    help="Fraction of peak FLOP/s the compute reaches, communication excluded (--mfu: its "
    "old name; the MFU of the whole step is printed).",
)
@click.option(
    "--recompute",
    type=click.Choice(["none", "selective", "full"]),
    default="selective",
    show_default=True,
)
@click.option("--tokens", default="1T", show_default=True, help="Token budget for the days.")
@click.option("--pool", default=None, help="GPU pool to train on (default: the first).")
@click.option("--explain", is_flag=True, help="Show the formulas behind every figure.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
def estimate(
    path: str,
    model: str,
    seq: int,
    global_batch: int,
    precision: str,
    parallel: str,
    compute_efficiency: float,
    recompute: str,
    tokens: str,
    pool: str | None,
    explain: bool,
    output: str,
) -> None:
    """Memory per GPU, compute and communication per step, what bounds it, tokens/s and days
    for a model on the spec's cluster, from the catalog's figures alone."""
    from provisioner.ops.estimate import EstimateError, size

    budget = _tokens(tokens)
    spec = _load(path, None).resolved
    try:
        sized = size(
            spec,
            model,
            pool,
            parallel,
            seq=seq,
            global_batch=global_batch,
            precision=precision,
            compute_efficiency=compute_efficiency,
            recompute=recompute,
        )
    except EstimateError as exc:
        fail_with(exc)
    e, itype = sized.estimate, sized.instance_type
    if output == "json":
        click.echo(
            json.dumps(
                {
                    "model": e.model.name,
                    "params": e.model.params,
                    "pool": sized.pool,
                    "gpus": e.gpus,
                    "parallel": e.parallel.text,
                    "memoryBytesPerGpu": e.memory,
                    "fits": e.fits,
                    "fittingParallel": e.fitting,
                    "seconds": e.seconds,
                    "stepSeconds": e.step_seconds,
                    "boundBy": e.bound,
                    "tokensPerSecond": e.tokens_per_second,
                    "computeEfficiency": e.compute_efficiency,
                    "mfu": e.mfu,
                    "days": e.days_for(budget),
                    "explain": e.explain,
                },
                indent=2,
            )
        )
        return
    gb = 1e9
    click.echo(
        f"{e.model.name} on {sized.pool}: {sized.count} x {itype.name} = {e.gpus} GPUs, "
        f"{e.parallel.text}, seq {seq}, global batch {global_batch}, {precision}, compute at "
        f"{compute_efficiency:.0%} of peak"
    )
    hbm = itype.gpu.hbm_gb if itype.gpu else 0
    total = sum(e.memory.values())
    click.echo(
        f"memory/GPU  {total / gb:7.1f} GB of {hbm:g} GB  "
        + "  ".join(f"{k} {v / gb:.1f}" for k, v in e.memory.items())
        + ("" if e.fits else "  -> does NOT fit")
    )
    if not e.fits:
        click.echo(f"            fits with: {e.fitting or 'no sharding on this pool; add nodes'}")
    for key, value in e.seconds.items():
        share = value / e.step_seconds if e.step_seconds else 0
        click.echo(f"{key:<18} {value:8.2f} s  ({share:4.0%} of the step)")
    click.echo(f"{'step':<18} {e.step_seconds:8.2f} s  bound by {e.bound}; MFU {e.mfu:.0%}")
    click.echo(
        f"throughput  {e.tokens_per_second:,.0f} tokens/s "
        f"({e.tokens_per_second / e.gpus:,.0f}/GPU); {budget:.3g} tokens in "
        f"{e.days_for(budget):,.1f} days"
    )
    if explain:
        click.echo("\nhow:")
        for line in e.explain:
            click.echo(f"  {line}")
    if not e.fits:
        sys.exit(1)
