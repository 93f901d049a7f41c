"""`fmctl check -f SPEC --from DIR`: judge what the node tools printed on a cluster's nodes
(GPUs, DCGM, EFA, NCCL) against the catalog, name the nodes to drain and replace."""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from provisioner.cli.common import GuardedCommand, _fail, _load, _target, fail_with
from provisioner.cli.options import name_argument, target_options

#: Checks that fail on a node itself: draining it is the remedy.
NODE_CHECKS = ("gpus", "dcgm", "efa")


@click.command("check", cls=GuardedCommand)
@name_argument(required=False)
@click.option("-f", "--file", "path", help="The cluster spec (default: the one `up` saved).")
@click.option(
    "--from",
    "folder",
    type=click.Path(file_okay=False, path_type=Path),
    help="Judge results already gathered (slurm/lib/node-check.sh's folder and "
    "all_reduce_perf logs in nccl/POOL.txt) instead of running on cluster NAME.",
)
@click.option(
    "--include-busy",
    is_flag=True,
    help="Also check nodes a user's job holds: the check waits for them to be free (it "
    "never shares a node), up to --timeout.",
)
@click.option("--no-nccl", is_flag=True, help="Skip the NCCL all-reduce across nodes.")
@click.option(
    "--timeout",
    type=click.IntRange(60),
    default=1800,
    show_default=True,
    help="Seconds each step (node checks, then NCCL) may wait for its nodes.",
)
@click.option(
    "--keep",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep what the nodes reported in this folder (for `--from` later, or a bug report).",
)
@click.option(
    "--save-baseline",
    is_flag=True,
    help="Keep each pool's NCCL bus bandwidth from this run (every check passed) as the "
    "pool's baseline: later checks fail below 85% of it.",
)
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@click.option("--json", "as_json", is_flag=True, help="Same as -o json (for CI).")
@target_options
def check(
    name: str | None,
    path: str | None,
    folder: Path | None,
    include_busy: bool,
    no_nccl: bool,
    timeout: int,
    keep: Path | None,
    save_baseline: bool,
    output: str,
    as_json: bool,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """Per node and per pool, pass or fail with figures: GPU count and health (nvidia-smi,
    DCGM level 2), EFA devices (fi_info) and the NCCL all-reduce bus bandwidth against what
    the catalog's network figures predict. Runs on cluster NAME's idle nodes only (a node
    with a user's job is left out and said so, unless --include-busy); or judges a folder
    with --from. Exit 1 when anything failed."""
    from provisioner.ops.check import (
        CheckUnavailable,
        baselines_to_save,
        gather_and_judge,
        judge_folder,
        keep_baselines,
        saved_spec,
    )
    from provisioner.ops.target import home_of

    if folder is None and name is None:
        _fail("say what to check", "fmctl check NAME (a running cluster), or --from DIR -f SPEC")
    baseline: list[Any] | CheckUnavailable = []
    try:
        if folder is not None:
            if path is None:
                _fail("--from needs the cluster's spec", "add -f cluster.yaml")
            if not (folder / "nodes").is_dir():
                _fail(
                    f"{folder}: no nodes/ folder of results",
                    "run slurm/lib/node-check.sh on each node with this folder (shared "
                    "storage) as its output, see `fmctl check --help`",
                )
            spec = _load(path, None).resolved
            report = judge_folder(spec, folder, home_of(state_dir))
            if save_baseline:
                baseline = _to_save(lambda: baselines_to_save(spec, folder, report))
        else:
            assert name is not None
            spec = _load(path, None).resolved if path else saved_spec(home_of(state_dir), name)
            if spec.metadata.name != name:
                _fail(
                    f"the spec is for {spec.metadata.name}, not {name}",
                    "give NAME's own spec with -f",
                )
            target = _target(spec.metadata.region, state_dir, sandbox)  # the spec's region
            with _results(keep) as where:
                report = gather_and_judge(
                    spec,
                    target,
                    where,
                    include_busy,
                    not no_nccl,
                    timeout,
                    lambda line: click.echo(f"check: {line}", err=True),
                )
                if save_baseline:
                    baseline = _to_save(lambda: baselines_to_save(spec, where, report))
    except CheckUnavailable as exc:
        fail_with(exc)
    if output == "json" or as_json:
        click.echo(json.dumps(report.as_data(), indent=2))
    else:
        _print(report, spec.scheduler)
    checked = sum(seen for seen, _ in report.coverage.values())
    if not checked:
        click.echo(
            "error: no node was checked" + (" (see why above)" if report.skipped else ""), err=True
        )
    if isinstance(baseline, CheckUnavailable):
        fail_with(baseline)
    if baseline:
        keep_baselines(home_of(state_dir), spec.metadata.name, baseline)
        _saved(baseline)
    if not report.ok or not checked:
        sys.exit(1)


def _to_save(measure: Callable[[], list[Any]]) -> list[Any] | Any:
    """The baselines to keep, or why none (reported after the check's own report)."""
    from provisioner.ops.check import CheckUnavailable

    try:
        return measure()
    except CheckUnavailable as exc:
        return exc


def _saved(rows: list[Any]) -> None:
    for row in rows:
        click.echo(
            f"check: baseline saved for pool {row.pool}: {row.busbw_gbs:.1f} GB/s at "
            f"{row.size_bytes / 2**30:g} GiB across {row.nodes} nodes",
            err=True,
        )


@contextlib.contextmanager
def _results(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        if (keep / "nodes").exists() or (keep / "nccl").exists():
            _fail(f"{keep} holds results already", "give --keep an empty or new folder")
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="fmctl-check-") as scratch:
        yield Path(scratch)


def _print(report: Any, scheduler: str) -> None:
    for verdict in report.verdicts:
        mark = "ok" if verdict.ok else "FAILED"
        figures = "; ".join(
            f"{f.check} {f.figure}" + ("" if f.ok is not False else f" (expected {f.expected})")
            for f in verdict.findings
        )
        click.echo(f"{verdict.subject:<28} {verdict.pool:<12} {mark:<7} {figures}")
    for node, pool, why in report.skipped:
        click.echo(f"{node:<28} {pool:<12} {'skipped':<7} {why}")
    for pool, (seen, total) in report.coverage.items():
        if seen < total:
            click.echo(
                f"pool {pool}: {seen} of {total} nodes reported (nodes busy with a job or "
                "down are not checked)"
            )
    failed = [v for v in report.verdicts if not v.ok]
    for verdict in failed:
        for finding in verdict.failed():
            click.echo(
                f"error: {verdict.subject}: {finding.check}: {finding.figure}, expected "
                f"{finding.expected}" + (f": {finding.detail}" if finding.detail else ""),
                err=True,
            )
        first = verdict.failed()[0].check
        if first in NODE_CHECKS:  # a node's own fault (not a pool's NCCL run, not a stray folder)
            click.echo(f"hint: {_drain(verdict.subject, first, scheduler)}", err=True)
    click.echo(
        f"{len(report.verdicts) - len(failed)} passed, {len(failed)} failed"
        + (
            ""
            if failed or not any(s for s, _ in report.coverage.values())
            else ": fit for a training run"
        )
    )


def _drain(node: str, check: str, scheduler: str) -> str:
    """How to take a failed node out of service, for the scheduler it runs under."""
    if scheduler == "slurm":
        return (
            f'drain and replace it: scontrol update nodename={node} state=drain reason="fmctl '
            f'check: {check}" (ParallelCluster replaces a drained static node)'
        )
    return (
        f"drain and replace it: kubectl cordon {node} && kubectl drain {node} "
        "--ignore-daemonsets --delete-emptydir-data, then terminate the instance (the node "
        "group launches a new one)"
    )
