"""`fmctl check`: gather what the GPU, DCGM, EFA and NCCL tools say on a cluster's idle nodes
(SSM Run Command on the Slurm head node, or a Job per node on EKS) and judge it against the
catalog; or judge a folder gathered some other way."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from provisioner.ops.target import Target, make_context
from provisioner.spec.model import ClusterSpec


class CheckUnavailable(Exception):
    """What `check` needs is not there; the message says what, the hint what to do."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def judge_folder(spec: ClusterSpec, folder: Path) -> Any:
    """The report of results gathered into ``folder`` (slurm/lib/node-check.sh's layout)."""
    from provisioner.catalog import load_catalog
    from provisioner.check.results import check_folder
    from provisioner.render.context import build_context

    return check_folder(build_context(spec, load_catalog()), folder)


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
        from provisioner.resources.eks import EksCluster
        from provisioner.resources.kube_stack import connect

        cluster = EksCluster().describe(ctx)
        if cluster is None or cluster["status"] != "ACTIVE":
            raise CheckUnavailable(
                f"{name}: no ACTIVE EKS cluster in {target.region}",
                f"`fmctl status {name}` shows what exists; `fmctl up` makes it",
            )
        api = connect(ctx, cluster["endpoint"], cluster["certificateAuthority"]["data"])
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
    report = check_folder(context, folder)
    report.skipped = skipped
    return report
