"""`fmctl catalog`: the accelerated instance types and their facts."""

from __future__ import annotations

import dataclasses
import shutil
from typing import Any

import click

from provisioner.catalog import Catalog, InstanceType


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    text = f"{value:g}"
    return f"{text}{unit}"


def _row(t: InstanceType) -> list[str]:
    gpu, net = t.gpu, t.network
    efa = f"v{net.efa_version} x{net.efa_interfaces}" if t.efa_supported else "-"
    ena_only = ",".join(str(c) for c in net.ena_only_cards) if t.is_gpu else ""
    return [
        t.name,
        f"{gpu.count} {gpu.model}" if gpu else "-",
        _fmt(gpu.hbm_gb, " GB") if gpu else "-",
        _fmt(gpu.total_hbm_gb, " GB") if gpu else "-",
        _fmt(gpu.hbm_bandwidth_tbs, " TB/s") if gpu else "-",
        "/".join(_fmt(v) for v in (gpu.bf16_pflops, gpu.fp8_pflops, gpu.fp4_pflops))
        if gpu
        else "-",
        str(t.cpu.vcpus),
        f"{t.cpu.memory_gib} GiB",
        f"gen{t.nvlink.generation} {_fmt(t.nvlink.bandwidth_tbs)} TB/s" if t.nvlink else "-",
        efa,
        f"{net.cards}" + (f" (ENA-only: {ena_only})" if ena_only else ""),
        _fmt(net.bandwidth_gbps, " Gbps"),
        f"{t.local_nvme.count}x{t.local_nvme.size_gb} GB" if t.local_nvme else "-",
        "yes" if t.placement_group else "no",
    ]


HEADERS = [
    "type",
    "GPUs",
    "HBM/GPU",
    "HBM total",
    "HBM BW/GPU",
    "PFLOPS/GPU BF16/FP8/FP4",
    "vCPU",
    "memory",
    "NVLink",
    "EFA",
    "net cards",
    "network",
    "local NVMe",
    "PG",
]


def catalog_json(catalog: Catalog, types: list[InstanceType]) -> dict[str, Any]:
    """The selected types with every fact and its source key, plus the source table."""
    return {
        "types": [dataclasses.asdict(t) for t in types],
        "sources": catalog.sources,
    }


@click.command("catalog")
@click.option("--family", help="Only this family, e.g. p5 (matches p5, p5e, p5en).")
@click.option(
    "-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@click.option(
    "--all", "show_all", is_flag=True, help="Include the CPU types used for head and system nodes."
)
def catalog(family: str | None, output: str, show_all: bool) -> None:
    """Show GPU, HBM, FLOPS, NVLink, EFA layout and network facts per instance type."""
    from provisioner.catalog import load_catalog

    cat = load_catalog()
    family = family.lower() if family else None  # P5 as p5: instance types are lowercase
    types = cat.family(family) if family else list(cat.types.values())
    if not show_all and not family:
        types = [t for t in types if t.is_gpu]
    if not types:
        raise click.UsageError(
            f"no instance types in family {family!r}; "
            f"families: {', '.join(sorted({t.family for t in cat.types.values()}))}"
        )
    if output == "json":
        from provisioner.cli.report import dump_json

        click.echo(dump_json(catalog_json(cat, types)))
        return
    from rich.console import Console
    from rich.table import Table

    width = table_width()
    shown = [i for i, h in enumerate(HEADERS) if h in columns_for(width)]
    table = Table(title="fmctl catalog (PFLOPS dense, per GPU)", header_style="bold")
    for i in shown:
        table.add_column(HEADERS[i], overflow="fold")
    for t in types:
        row = _row(t)
        table.add_row(*(row[i] for i in shown))
    # rich honours NO_COLOR itself.
    console = Console(width=width)
    console.print(table)
    if len(shown) < len(HEADERS):
        dropped = ", ".join(h for i, h in enumerate(HEADERS) if i not in shown)
        console.print(
            f"left out to fit {width} columns: {dropped}; a wider terminal or `-o json` "
            "shows every fact"
        )


#: Columns kept as the terminal narrows, most telling first (every one at WIDE and above).
NARROW = ["type", "GPUs", "HBM/GPU", "EFA", "PG"]
MEDIUM = [*NARROW, "HBM total", "NVLink", "net cards", "local NVMe"]
WIDE = 190


def columns_for(width: int) -> list[str]:
    """The columns that fit ``width`` characters."""
    if width >= WIDE:
        return HEADERS
    return MEDIUM if width >= 130 else NARROW


def table_width() -> int:
    """The terminal's width on a terminal (or COLUMNS when set); WIDE when piped, so a
    file gets every column."""
    import os
    import sys

    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return shutil.get_terminal_size((WIDE, 24)).columns
    return WIDE
