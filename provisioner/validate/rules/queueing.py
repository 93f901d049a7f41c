"""Rules for Kueue and NVIDIA's DRA driver on EKS (kubernetes.queueing, GB200's NVLink
domains). Sources: ``catalog/charts.py`` (each chart's Kubernetes floor), Kueue 0.19.2's
``pkg/dra/claims.go`` (it reads a job's ResourceClaimTemplates as ``resource.k8s.io/v1``,
which Kubernetes serves from 1.34, where DRA became GA), and the EKS User Guide, "Use
P6e-GB200 UltraServers with Amazon EKS" (1.33 and above, DRA required)."""

from __future__ import annotations

from collections.abc import Iterator

from provisioner.catalog.charts import GB200_DRA_KUBERNETES, KUEUE, minor
from provisioner.spec.model import ClusterSpec
from provisioner.spec.problems import Problem
from provisioner.spec.resolve import default_queueing
from provisioner.validate.rules.registry import RuleContext, rule

#: The first Kubernetes minor that serves resource.k8s.io/v1 (DRA GA; the Kubernetes 1.34
#: release notes), which Kueue 0.19's DRA integration reads claims with.
DRA_V1_KUBERNETES = "1.34"


def _ultraserver_pool(spec: ClusterSpec, ctx: RuleContext) -> int | None:
    for i, pool in enumerate(spec.compute.gpu_pools):
        itype = ctx.catalog.get(pool.instance_type)
        if itype is not None and itype.ultra_server:
            return i
    return None


def _known_version(version: str) -> bool:
    try:
        minor(version)
    except ValueError:
        return False
    return True


@rule("queueing-kubernetes-version")
def queueing_version(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Kueue runs from its Kubernetes floor; on UltraServer pools its jobs claim a GB200
    ComputeDomain channel, which Kueue 0.19 resolves through resource.k8s.io/v1 only."""
    if ctx.scheduler != "kubernetes":
        return
    queueing = spec.kubernetes.queueing or default_queueing(spec)
    version = spec.kubernetes.version
    if queueing != "kueue" or not _known_version(version):
        return
    where = ("kubernetes", "queueing") if spec.kubernetes.queueing else ("kubernetes", "version")
    if minor(version) < minor(KUEUE.min_kubernetes):
        yield Problem(
            "queueing-kubernetes-version",
            f"Kueue {KUEUE.version} needs Kubernetes {KUEUE.min_kubernetes} or newer, not "
            f"{version}",
            where,
            hint="raise kubernetes.version, or set kubernetes.queueing: none",
        )
        return
    ultra = _ultraserver_pool(spec, ctx)
    if ultra is not None and minor(version) < minor(DRA_V1_KUBERNETES):
        yield Problem(
            "queueing-kubernetes-version",
            f"Kueue {KUEUE.version} admits a GB200 job's ComputeDomain claim only where "
            f"Kubernetes serves resource.k8s.io/v1 ({DRA_V1_KUBERNETES}+); on {version} "
            "every job on the UltraServer pool would stay pending",
            where,
            hint=f'set kubernetes.version to "{DRA_V1_KUBERNETES}" or newer, or '
            "kubernetes.queueing: none",
            related=(("compute", "gpuPools", ultra, "instanceType"),),
        )


@rule("ultraserver-eks-nvlink")
def ultraserver_eks_nvlink(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """UltraServer pools on EKS share NVLink across nodes through NVIDIA's DRA driver and a
    ComputeDomain per job, which fmctl installs from Kubernetes 1.33, where EKS runs
    P6e-GB200 with DRA. Below it: a warning, so the cluster can still be made (pods then
    use one node's GPUs over NVLink and EFA between nodes)."""
    if ctx.scheduler != "kubernetes" or not _known_version(spec.kubernetes.version):
        return
    ultra = _ultraserver_pool(spec, ctx)
    if ultra is None or minor(spec.kubernetes.version) >= minor(GB200_DRA_KUBERNETES):
        return
    itype = spec.compute.gpu_pools[ultra].instance_type
    yield Problem(
        "ultraserver-eks-nvlink",
        f"{itype} pods on EKS share NVLink across the UltraServer only with DRA, which EKS "
        f"runs P6e-GB200 with from Kubernetes {GB200_DRA_KUBERNETES}; on "
        f"{spec.kubernetes.version} fmctl installs no DRA driver and NCCL crosses nodes over "
        "EFA only",
        ("kubernetes", "version"),
        level="warning",
        hint=f'set kubernetes.version to "{GB200_DRA_KUBERNETES}" or newer (fmctl then '
        "installs NVIDIA's DRA driver and gives each job a ComputeDomain)",
        related=(("compute", "gpuPools", ultra, "instanceType"),),
    )
