"""`fmctl check`: gather what the GPU, DCGM, EFA and NCCL tools say on a cluster's idle nodes
(SSM Run Command on the Slurm head node, or a Job per node on EKS) and judge it against the
catalog; or judge a folder gathered some other way."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from provisioner import FmctlError
from provisioner.ops.target import Target, make_context
from provisioner.spec.model import ClusterSpec


class CheckUnavailable(FmctlError):
    """What `check` needs is not there; the message says what, the hint what to do."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message, hint)


def judge_folder(spec: ClusterSpec, folder: Path, home: Path | None = None) -> Any:
    """The report of results gathered into ``folder`` (slurm/lib/node-check.sh's layout),
    NCCL judged against the baselines saved in ``home`` for the cluster, if any."""
    from provisioner.catalog import load_catalog
    from provisioner.check.results import check_folder
    from provisioner.render.context import build_context

    saved = saved_baselines(home, spec.metadata.name) if home is not None else ()
    return check_folder(build_context(spec, load_catalog()), folder, saved)


def saved_baselines(home: Path, name: str) -> tuple[Any, ...]:
    """The NCCL baselines `fmctl check --save-baseline` kept for cluster ``name``."""
    from provisioner.catalog.nccl_baselines import NcclBaseline
    from provisioner.state.store import ClusterState

    rows = []
    for row in ClusterState(home, name).nccl_baselines():
        try:
            rows.append(NcclBaseline(**row))
        except TypeError:
            continue  # a row of another fmctl's shape: not a baseline this one can use
    return tuple(rows)


def baselines_to_save(spec: ClusterSpec, folder: Path, report: Any) -> list[Any]:
    """Each pool's NCCL figure under ``folder``, as its baseline; only from a run where every
    check passed (else CheckUnavailable says what failed)."""
    import datetime

    from provisioner.catalog import load_catalog
    from provisioner.check.results import measured_baselines
    from provisioner.render.context import build_context

    failed = [v.subject for v in report.verdicts if not v.ok]
    if failed:
        raise CheckUnavailable(
            f"no baseline saved: a baseline comes from a healthy run, and {', '.join(failed)} "
            "failed",
            "fix what failed (or leave those nodes out), then run the check again",
        )
    when = datetime.date.today().isoformat()
    measured = measured_baselines(build_context(spec, load_catalog()), folder, when)
    if not measured:
        raise CheckUnavailable(
            "no baseline saved: no multi-node NCCL run in these results",
            "run the check with NCCL (no --no-nccl) on a pool of two or more idle nodes",
        )
    return measured


def keep_baselines(home: Path, name: str, rows: list[Any]) -> None:
    """Save ``rows`` for cluster ``name``, replacing those for the same pool and node count."""
    import dataclasses

    from provisioner.state.store import ClusterState

    new = {(b.pool, b.nodes) for b in rows}
    kept = [b for b in saved_baselines(home, name) if (b.pool, b.nodes) not in new]
    ClusterState(home, name).save_nccl_baselines([dataclasses.asdict(b) for b in [*kept, *rows]])


def saved_spec(home: Path, name: str) -> ClusterSpec:
    """The spec `up` last applied for ``name`` here, validated."""
    from provisioner.spec.source import parse_source
    from provisioner.state.store import ClusterState
    from provisioner.validate import validate_document

    text = ClusterState(home, name).spec_text()
    if text is None:
        raise CheckUnavailable(
            f"no spec saved for {name} here", "give the cluster's spec with -f cluster.yaml"
        )
    spec = validate_document(parse_source(text)[0]).resolved
    if spec is None:
        raise CheckUnavailable(
            f"the spec `up` saved for {name} does not validate any more", "use -f"
        )
    return spec


def _kube_api(ctx: Any, name: str, region: str) -> Any:
    """The Kubernetes API of EKS cluster ``name`` (it must be ACTIVE)."""
    from provisioner.resources.eks import EksCluster
    from provisioner.resources.kube_api import connect

    cluster = EksCluster().describe(ctx)
    if cluster is None or cluster["status"] != "ACTIVE":
        raise CheckUnavailable(
            f"{name}: no ACTIVE EKS cluster in {region}",
            f"`fmctl status {name}` shows what exists; `fmctl up` makes it",
        )
    return connect(ctx, cluster["endpoint"], cluster["certificateAuthority"]["data"])


def gather_and_judge(
    spec: ClusterSpec,
    target: Target,
    folder: Path,
    include_busy: bool,
    nccl: bool,
    timeout: int,
    progress: Callable[[str], None],
) -> Any:
    """Run the node checks and NCCL on the live cluster into ``folder``, and judge them; the
    report says which nodes were left out and why."""
    from provisioner.catalog import load_catalog
    from provisioner.check.results import check_folder
    from provisioner.render.context import build_context

    context = build_context(spec, load_catalog())
    name = spec.metadata.name
    ctx = make_context(target, name)
    if context.scheduler == "kubernetes":
        from provisioner.check.kube_gather import gather

        api = _kube_api(ctx, name, target.region)
        try:
            found = gather(
                api,
                context,
                folder,
                include_busy,
                timeout,
                nccl,
                on_progress=progress,
                scale=ctx.time_scale,
            )
            skipped = found.skipped
        finally:
            close = getattr(api, "close", None)
            if close:
                close()
    else:
        from provisioner.check.slurm_gather import gather_slurm

        skipped = gather_slurm(ctx, context, folder, include_busy, timeout, nccl, progress)
    report = check_folder(context, folder, saved_baselines(target.home, name))
    report.skipped = skipped
    return report


def health(spec: ClusterSpec, target: Target) -> Any:
    """`fmctl health`: every GPU node's place in the health loop (read-only), as the
    scheduler records it (provisioner/check/health_gather.py)."""
    from provisioner.catalog import load_catalog
    from provisioner.catalog.eks_repair import VERIFY_NAMESPACE
    from provisioner.check import health_gather
    from provisioner.render.context import build_context

    context = build_context(spec, load_catalog())
    name = spec.metadata.name
    ctx = make_context(target, name)
    if context.scheduler != "kubernetes":
        return health_gather.gather_slurm(ctx, context)
    api = _kube_api(ctx, name, target.region)
    try:
        repairs = (
            api.get("v1", "ConfigMap", health_gather.REPAIRS_MAP, VERIFY_NAMESPACE)
            if context.health_verify_kubernetes_gate
            else None
        )
        return health_gather.kube_report(
            context, api.list("v1", "Node"), api.list("v1", "Pod"), repairs
        )
    finally:
        close = getattr(api, "close", None)
        if close:
            close()


def in_service(report: Any) -> dict[str, int]:
    """Per pool, the nodes `fmctl health` calls healthy and that run (a powered-down cloud
    node of a dynamic Slurm pool is healthy but runs nothing)."""
    out: dict[str, int] = {}
    for node in report.nodes:
        if node.state == "healthy" and node.detail != "powered down":
            out[node.pool] = out.get(node.pool, 0) + 1
    return out


def wait_healthy(
    spec: ClusterSpec,
    target: Target,
    timeout: float,
    on_progress: Callable[[str], None] = lambda line: None,
) -> tuple[bool, float, Any]:
    """`up --wait-healthy`: look until every GPU pool has its nodes in service and healthy
    (ParallelCluster's static nodes passed the verify gate before they registered; EKS's
    are Ready with no failing health condition and no startup taint), or ``timeout``
    seconds pass. (ok, seconds, the last report)."""
    import time

    from provisioner.catalog import load_catalog
    from provisioner.render.context import build_context

    context = build_context(spec, load_catalog())
    slurm = context.scheduler != "kubernetes"
    wanted = {p.name: (p.min_count if slurm else p.count) for p in context.pools}
    # The sandbox's clock runs faster: so do the looks.
    every = max(0.05, 15.0 * make_context(target, spec.metadata.name).time_scale)
    started = time.monotonic()
    said = ""
    while True:
        report = health(spec, target)
        have = in_service(report)
        elapsed = time.monotonic() - started
        if all(have.get(pool, 0) >= n for pool, n in wanted.items()):
            return True, elapsed, report
        line = ", ".join(f"{pool} {have.get(pool, 0)}/{n}" for pool, n in sorted(wanted.items()))
        if line != said:
            on_progress(f"healthy nodes: {line}")
            said = line
        if elapsed > timeout:
            return False, elapsed, report
        time.sleep(every)
