"""The typed context templates render from: every decision made here, in Python.

Templates only lay values out; anything computed (capacity-type names per tool, EFA layouts,
Slurm socket counts, labels, placeholders) is a field here, so it is tested once and the
templates stay free of logic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from provisioner.catalog import Catalog, architecture_of, autoscaler
from provisioner.catalog.eks_repair import RepairOverride, overrides
from provisioner.catalog.faults import repair_budget
from provisioner.render.images import Images
from provisioner.render.placeholders import placeholder
from provisioner.render.pools import PoolContext, pool_context
from provisioner.render.queueing import (
    CHANNEL_RESOURCE,
    Flavor,
    Queueing,
    Quota,
    Topology,
    pool_levels,
    topology_name,
    uses_dra,
)
from provisioner.spec.defaults import IDLE_ALERT_AFTER
from provisioner.spec.durations import seconds
from provisioner.spec.model import ClusterSpec, FsxDeploymentType, Network
from provisioner.spec.resolve import kubernetes_agent
from provisioner.spec.tags import OWNER_TAG

#: ParallelCluster's ComputeNodeBootstrapTimeout unless told (aws-parallelcluster-cookbook
#: at f75d84c, aws-parallelcluster-computefleet/attributes/computefleet.rb).
DEFAULT_BOOTSTRAP_TIMEOUT = 1800


@dataclass(frozen=True)
class RepositoryLink:
    """One FSx data-repository association: an S3 prefix at a file-system path."""

    name: str
    s3_path: str
    file_system_path: str
    auto_import: bool
    auto_export: bool


@dataclass(frozen=True)
class FsxContext:
    """FSx for Lustre: new (capacity, type, throughput, S3 link) or existing (id only)."""

    existing_id: str | None
    capacity_gib: int | None
    deployment_type: FsxDeploymentType | None
    throughput_per_tib: int | None
    mount_path: str
    import_path: str | None
    export_path: str | None
    #: storage.fsxLustre.deletionPolicy: retain (`down` keeps it).
    retain: bool = False

    @property
    def file_system_id(self) -> str:
        """The id, or the placeholder `up` fills."""
        return self.existing_id or placeholder("fileSystemId")

    @property
    def uses_dra(self) -> bool:
        """PERSISTENT_2 links S3 through a data-repository association; others at creation."""
        return self.deployment_type == "PERSISTENT_2" and bool(self.import_path)

    @property
    def links(self) -> tuple[RepositoryLink, ...]:
        """The associations: one, two-way, when the export prefix is the import prefix
        (what the user asked: deletes flow back too), else an import-only one and a second,
        export-only one. (An export prefix inside the import prefix is refused at
        validation, rule fsx-export-under-import: it could only be one two-way link over the
        whole dataset.)"""
        if not self.import_path:
            return ()
        source = self.import_path.rstrip("/")
        export = self.export_path.rstrip("/") if self.export_path else None
        if export is None or export == source:
            return (RepositoryLink("s3", source, "/s3", True, export is not None),)
        return (
            RepositoryLink("s3", source, "/s3", True, False),
            RepositoryLink("s3-export", export, "/s3-export", False, True),
        )


@dataclass(frozen=True)
class PcsContext:
    """Slurm on AWS PCS (slurm.provider: pcs)."""

    size: str
    slurm_version: str
    accounting: str
    custom_settings: tuple[tuple[str, str], ...]
    login_count: int
    #: slurm.amiId, for every node group; None: AWS's sample AMI per architecture.
    ami_id: str | None

    def ami(self, architecture: str) -> str:
        """The AMI of a node group of ``architecture`` (or its placeholder)."""
        return self.ami_id or placeholder(f"pcsAmiId.{architecture}")


@dataclass(frozen=True)
class ClusterContext:
    """Everything a template may use."""

    name: str
    region: str
    availability_zone: str
    scheduler: str
    kubernetes_version: str
    vpc_cidr: str | None
    existing_vpc_id: str | None
    ssh_cidr: str | None
    api_cidrs: tuple[str, ...]
    private_subnet: str
    public_subnet: str
    secondary_subnet: str
    #: The EKS control plane's subnets: the nodes' AZ (private, and public when there is
    #: one) and a second AZ.
    eks_subnets: tuple[str, ...]
    head_node_type: str
    head_node_root_gib: int
    head_node_key: str | None
    system_node_type: str
    #: The system nodes' architecture (``catalog.architecture_of`` their type).
    system_node_arch: str
    system_node_count: int
    pools: tuple[PoolContext, ...]
    fsx: FsxContext | None
    local_nvme_path: str | None
    prometheus: bool
    grafana: bool
    gpu_metrics: bool
    efa_metrics: bool
    #: Amazon Managed Service for Prometheus workspace Prometheus remote-writes to, if any.
    amp_workspace_arn: str | None
    slurm_os: str
    topology_aware: bool
    scaledown_idletime: int
    #: How long a GPU node idles before GpuNodeIdle fires (cost.idle.after, else 30m).
    idle_after: str
    #: ParallelCluster's HealthChecks/Gpu on every queue (opt-in: aws-parallelcluster#6777).
    gpu_health_checks: bool
    tags: tuple[tuple[str, str], ...]
    images: Images = field(default_factory=Images)
    #: The repository and revision Argo CD and Flux read this folder from (gitops.*).
    git_repo_url: str | None = None
    git_revision: str = "main"
    #: The folder's path inside that repository ("." for its root).
    git_path: str = ""
    #: Rendered with the live cluster's values (``render --from-cluster``): no placeholders.
    filled: bool = False
    #: Slurm's provider: parallelcluster | pcs.
    slurm_provider: str = "parallelcluster"
    pcs: PcsContext | None = None
    #: Kueue (kubernetes.queueing: kueue), None without it.
    queueing: Queueing | None = None
    #: UltraServer pools whose nodes NVIDIA's DRA driver serves ComputeDomains on (empty:
    #: no DRA driver).
    dra_pools: tuple[str, ...] = ()
    #: fmctl's node health agent (spec health:): on, every N seconds, its repair budget.
    health_enabled: bool = True
    health_interval_s: int = 30
    health_max_in_repair: str = "10%"
    #: health.repair: replace | reboot | drain-only.
    health_repair: str = "replace"
    #: The verify gate's DCGM diagnostic level (0: none).
    health_verify_dcgm_level: int = 2
    health_verify_efa_loopback: bool = True
    #: The verify gate's 2-node NCCL pair (health.verify.ncclPair).
    health_verify_nccl_pair: bool = True
    #: EKS: the startup taint and fmctl's verify controller (health.verify.kubernetesGate).
    health_verify_kubernetes_gate: bool = False
    #: EKS: fmctl's node health agent DaemonSet (health.kubernetesAgent).
    health_kubernetes_agent: bool = False

    @property
    def dra(self) -> bool:
        """NVIDIA's DRA driver is installed: jobs on UltraServer pools get a ComputeDomain."""
        return bool(self.dra_pools)

    @property
    def topology_style(self) -> str:
        """Slurm's topology plugin: ``block`` when a pool runs on UltraServers (one block per
        NVLink domain, as ParallelCluster 3.14+ configures GB200 queues:
        aws-parallelcluster-cookbook#3002), ``tree`` (the network layers) otherwise."""
        return "block" if any(p.itype.ultra_server for p in self.pools) else "tree"

    @property
    def system_ami_type(self) -> str:
        """EKS's AMI type for the system nodes, by their architecture (botocore's ``eks``
        AMITypes: AL2023_x86_64_STANDARD | AL2023_ARM_64_STANDARD)."""
        arm = self.system_node_arch == "arm64"
        return "AL2023_ARM_64_STANDARD" if arm else "AL2023_x86_64_STANDARD"

    def pytorch_image(self, pool: str) -> str:
        """The PyTorch image for the nodes of pool ``pool`` (arm64 ones get the arm64 one)."""
        found = next(p for p in self.pools if p.name == pool)
        return self.images.pytorch_for(found.itype.architecture)

    @property
    def repo_url(self) -> str:
        """The repository, or its placeholder."""
        return self.git_repo_url or placeholder("gitRepoUrl")

    @property
    def stack_path(self) -> str:
        """Where kubernetes/ is, from the repository's root (Argo CD's form: no ./)."""
        base = (self.git_path or self.name).strip("/")
        return "kubernetes" if base in ("", ".") else f"{base}/kubernetes"

    @property
    def charts_path(self) -> str:
        """Where charts/ (values files, and CRDs a chart needs first) is, from the
        repository's root."""
        base = (self.git_path or self.name).strip("/")
        return "charts" if base in ("", ".") else f"{base}/charts"

    @property
    def flux_charts_path(self) -> str:
        """Where gitops/flux/ (the upstream charts' HelmReleases) is, from the repository's
        root."""
        base = (self.git_path or self.name).strip("/")
        return "gitops/flux" if base in ("", ".") else f"{base}/gitops/flux"

    @property
    def amp_region(self) -> str | None:
        """The region of the AMP workspace (its ARN's), which signs the remote writes."""
        return self.amp_workspace_arn.split(":")[3] if self.amp_workspace_arn else None

    @property
    def amp_remote_write_url(self) -> str | None:
        """The workspace's remote-write endpoint."""
        if not self.amp_workspace_arn:
            return None
        workspace = self.amp_workspace_arn.rsplit("/", 1)[1]
        suffix = ".com.cn" if self.amp_workspace_arn.startswith("arn:aws-cn:") else ".com"
        return (
            f"https://aps-workspaces.{self.amp_region}.amazonaws{suffix}/workspaces/"
            f"{workspace}/api/v1/remote_write"
        )

    def compute_bootstrap_timeout(self) -> int | None:
        """ParallelCluster's ComputeNodeBootstrapTimeout the verify gate needs, or None when
        its default does. The gate runs in OnNodeConfigured, inside the node's bootstrap,
        and ParallelCluster gives that 1800 s, its Slurm ResumeTimeout and clustermgtd's
        node_replacement_timeout too (aws-parallelcluster-cookbook at f75d84c:
        computefleet.rb, slurm_parallelcluster.conf, parallelcluster_clustermgtd.conf.erb):
        a DCGM diagnostic of level 3 (about 15 minutes, dcgmi-diag(1)) or 4 cannot fit. The
        bootstrap gets the diagnostic's deadline on top (verify-node.sh's: 1800 s, 14400 at
        level 4)."""
        level = self.health_verify_dcgm_level
        if not self.health_enabled or level < 3:
            return None
        return DEFAULT_BOOTSTRAP_TIMEOUT + (14400 if level >= 4 else 1800)

    @property
    def verify_replaces(self) -> bool:
        """fmctl's controller on EKS replaces nodes: those that fail the verify gate
        (health.repair: replace), or those fmctl's node agent finds faulty
        (health.kubernetesAgent)."""
        return self.gate_replaces or self.health_kubernetes_agent

    @property
    def gate_replaces(self) -> bool:
        """The EKS verify gate replaces the nodes that fail it (health.repair: replace)."""
        return (
            self.health_verify_kubernetes_gate
            and self.health_enabled
            and self.health_repair == "replace"
        )

    @property
    def health_controller(self) -> bool:
        """Does fmctl's controller run on EKS (the verify gate, or the node agent)?"""
        return self.health_verify_kubernetes_gate or self.health_kubernetes_agent

    def repair_budget(self, pool: PoolContext) -> int:
        """Nodes of ``pool`` that may be in repair at once (health.maxInRepair)."""
        return repair_budget(self.health_max_in_repair, pool.count)

    @property
    def repair_overrides(self) -> tuple[RepairOverride, ...]:
        """EKS node auto repair's overrides for health.repair (catalog.eks_repair)."""
        return overrides(self.health_repair)

    @property
    def efa_pools(self) -> tuple[PoolContext, ...]:
        """Pools with EFA on."""
        return tuple(p for p in self.pools if p.efa)

    @property
    def ssh_allowed(self) -> str:
        """Who may reach the head node's port 22.

        ParallelCluster opens SSH to 0.0.0.0/0 when its Ssh section is left out, so "nobody"
        is written as the VPC's own block: reachable only from inside, e.g. over SSM.
        """
        return self.ssh_cidr or self.vpc_cidr or placeholder("vpcCidr")

    @property
    def artifact_prefix(self) -> str:
        """Where `up` uploads slurm/ in the artifact bucket."""
        return f"s3://{placeholder('artifactBucket')}/{self.name}/slurm"

    def ph(self, name: str) -> str:
        """A placeholder, for templates."""
        return placeholder(name)

    @property
    def autoscaled_pools(self) -> tuple[PoolContext, ...]:
        """The pools the Cluster Autoscaler sizes (none: it is not installed)."""
        return tuple(p for p in self.pools if p.autoscaled)

    @property
    def autoscaler_image(self) -> str:
        """The Cluster Autoscaler matching the cluster's Kubernetes minor."""
        return autoscaler.image(self.kubernetes_version)

    @property
    def autoscaler_class(self) -> str:
        """The ProvisioningRequest class Kueue asks the autoscaler for nodes with."""
        return autoscaler.PROVISIONING_CLASS

    @property
    def autoscaler_gpu_threshold(self) -> str:
        """The GPU share below which the autoscaler counts a node unneeded."""
        return autoscaler.GPU_UTILIZATION_THRESHOLD

    @property
    def scale_down_unneeded_time(self) -> str:
        """cost.idle.after as the autoscaler's flag takes it (a Go duration: no days)."""
        total = seconds(self.idle_after) or 0
        hours, rest = divmod(total, 3600)
        minutes, secs = divmod(rest, 60)
        parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else ""]
        return "".join(parts) + (f"{secs}s" if secs or not any(parts) else "")


def _queueing(spec: ClusterSpec, pools: tuple[PoolContext, ...], dra: bool) -> Queueing:
    """Kueue's objects from the pools (render.queueing says why each is as it is)."""
    channels = dra and any(p.itype.ultra_server for p in pools)
    covered = ["cpu", "memory", "nvidia.com/gpu"]
    if any(p.efa for p in pools):
        covered.append("vpc.amazonaws.com/efa")
    covered.append("hugepages-2Mi")
    if channels:
        covered.append(CHANNEL_RESOURCE)
    topologies: dict[str, Topology] = {}
    flavors = []
    for p in pools:
        layers = p.itype.network_layers.count if p.itype.network_layers else 0
        levels = pool_levels(layers, p.itype.ultra_server)
        topo = Topology(topology_name(levels), levels)
        topologies.setdefault(topo.name, topo)
        amounts = {
            "cpu": str(p.itype.cpu.vcpus * p.count),
            "memory": f"{p.itype.cpu.memory_gib * p.count}Gi",
            "nvidia.com/gpu": str(p.gpus * p.count),
            "vpc.amazonaws.com/efa": str(p.efa_devices * p.count if p.efa else 0),
            "hugepages-2Mi": f"{p.hugepages_2mi * 2 * p.count}Mi",
            # One channel per pod, one pod per node: the pool's node count.
            CHANNEL_RESOURCE: str(p.count if p.itype.ultra_server else 0),
        }
        quotas = tuple(Quota(r, amounts[r]) for r in covered)
        flavors.append(Flavor(p.name, p.name, topo.name, quotas, p.efa, p.autoscaled))
    return Queueing(
        topologies=tuple(sorted(topologies.values(), key=lambda t: t.name)),
        flavors=tuple(flavors),
        covered=tuple(covered),
        mode=spec.kubernetes.topology_placement,
        channels=channels,
    )


def _eks_subnets(net: Network) -> tuple[str, ...]:
    """A new VPC's three subnets, or what an existing VPC's spec names."""
    if net.vpc_id is None:
        return (
            placeholder("privateSubnetId"),
            placeholder("publicSubnetId"),
            placeholder("secondarySubnetId"),
        )
    named = (net.subnet_id, net.public_subnet_id, net.secondary_subnet_id)
    return tuple(s for s in named if s)


def os_login_user(os: str) -> str:
    """The user ParallelCluster's image of ``os`` logs in as (the cookbook's cluster_user per
    platform: ec2-user on Amazon Linux and RHEL, ubuntu, rocky)."""
    if os.startswith("ubuntu"):
        return "ubuntu"
    if os.startswith("rocky"):
        return "rocky"
    return "ec2-user"


def parallelcluster_owns_topology(spec: ClusterSpec, catalog: Catalog) -> bool:
    """ParallelCluster 3.14+ writes topology.conf itself (topology/block, one block per
    UltraServer) for p6e-gb200 Capacity Blocks, on create and on update (the cookbook's
    block topology, aws-parallelcluster-cookbook#3002): a second writer would overwrite it,
    so on such a cluster fmctl writes no topology of its own."""
    if spec.scheduler != "slurm" or spec.slurm.provider != "parallelcluster":
        return False
    return any(
        (t := catalog.get(p.instance_type)) is not None and t.ultra_server
        for p in spec.compute.gpu_pools
    )


def build_context(spec: ClusterSpec, catalog: Catalog) -> ClusterContext:
    """The render context of a resolved spec (``provisioner.spec.resolve.resolve``)."""
    net = spec.network
    fsx_spec = spec.storage.fsx_lustre
    fsx = None
    if fsx_spec is not None:
        s3 = fsx_spec.s3
        fsx = FsxContext(
            existing_id=fsx_spec.file_system_id,
            capacity_gib=fsx_spec.capacity_gib,
            deployment_type=fsx_spec.deployment_type,
            throughput_per_tib=fsx_spec.throughput_per_tib,
            mount_path=fsx_spec.mount_path,
            import_path=s3.import_path if s3 else None,
            export_path=s3.export_path if s3 else None,
            retain=fsx_spec.deletion_policy == "retain",
        )
    tags = {**spec.metadata.tags, OWNER_TAG: spec.metadata.name}
    obs = spec.observability
    kube = spec.scheduler == "kubernetes"
    idle = spec.cost.idle
    autoscaling = kube and idle is not None and idle.action == "scale-down"
    pools = tuple(pool_context(spec, p, catalog, autoscaling) for p in spec.compute.gpu_pools)
    ultra = tuple(p.name for p in pools if p.itype.ultra_server)
    dra = kube and uses_dra(spec.kubernetes.version, len(ultra))
    kueue = kube and spec.kubernetes.queueing == "kueue"
    return ClusterContext(
        name=spec.metadata.name,
        region=spec.metadata.region,
        availability_zone=net.availability_zone,
        scheduler=spec.scheduler,
        kubernetes_version=spec.kubernetes.version,
        vpc_cidr=net.vpc_cidr,
        existing_vpc_id=net.vpc_id,
        ssh_cidr=net.ssh_cidr,
        api_cidrs=tuple(net.api_cidrs),
        private_subnet=net.subnet_id or placeholder("privateSubnetId"),
        public_subnet=net.public_subnet_id or placeholder("publicSubnetId"),
        secondary_subnet=net.secondary_subnet_id or placeholder("secondarySubnetId"),
        eks_subnets=_eks_subnets(net),
        head_node_type=spec.compute.head_node.instance_type,
        head_node_root_gib=spec.compute.head_node.root_volume_gib,
        head_node_key=spec.compute.head_node.key_name,
        system_node_type=spec.compute.system_nodes.instance_type,
        system_node_arch=architecture_of(spec.compute.system_nodes.instance_type, catalog),
        system_node_count=spec.compute.system_nodes.count,
        pools=pools,
        fsx=fsx,
        local_nvme_path=spec.storage.local_nvme.mount_path if spec.storage.local_nvme else None,
        prometheus=obs.prometheus,
        grafana=obs.grafana,
        gpu_metrics=obs.gpu_metrics,
        efa_metrics=obs.efa_metrics,
        amp_workspace_arn=obs.amp_workspace_arn if obs.prometheus else None,
        slurm_os=spec.slurm.os,
        topology_aware=spec.slurm.topology_aware
        and not parallelcluster_owns_topology(spec, catalog),
        scaledown_idletime=spec.slurm.scaledown_idletime,
        idle_after=spec.cost.idle.after if spec.cost.idle else IDLE_ALERT_AFTER,
        gpu_health_checks=spec.slurm.gpu_health_checks,
        tags=tuple(sorted(tags.items())),
        images=Images.for_region(spec.metadata.region),
        git_repo_url=spec.gitops.repo_url,
        git_revision=spec.gitops.revision,
        git_path=spec.gitops.path or "",
        slurm_provider=spec.slurm.provider,
        pcs=_pcs(spec) if spec.scheduler == "slurm" and spec.slurm.provider == "pcs" else None,
        queueing=_queueing(spec, pools, dra) if kueue else None,
        dra_pools=ultra if dra else (),
        health_enabled=spec.health.enabled,
        health_interval_s=spec.health.interval_seconds() or 30,
        health_max_in_repair=str(spec.health.max_in_repair).strip(),
        health_repair=spec.health.repair,
        health_verify_dcgm_level=spec.health.verify.dcgm_level,
        health_verify_efa_loopback=spec.health.verify.efa_loopback,
        health_verify_nccl_pair=spec.health.verify.nccl_pair,
        health_verify_kubernetes_gate=kube
        and spec.health.enabled
        and spec.health.verify.kubernetes_gate is not False,
        health_kubernetes_agent=kubernetes_agent(spec, spec.scheduler),
    )


def _pcs(spec: ClusterSpec) -> PcsContext:
    pcs = spec.slurm.pcs
    return PcsContext(
        size=pcs.size,
        slurm_version=pcs.slurm_version,
        accounting=pcs.accounting,
        custom_settings=tuple(sorted(pcs.custom_settings.items())),
        login_count=pcs.login_count,
        ami_id=spec.slurm.ami_id,
    )
