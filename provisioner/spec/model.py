"""The cluster spec, ``apiVersion: fmctl.dev/v1alpha1``, ``kind: Cluster``: the user contract.

The models check shape and types only (strict: no string-to-number coercion, unknown keys are
errors). Rules that need an explanation and a hint (id formats, FSx steps, EFA support, ...)
live in ``provisioner.validate``. Optional fields whose default depends on other fields or on
the catalog stay ``None`` here and are filled by ``provisioner.spec.defaults``.
"""

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from provisioner.spec import defaults as d

API_VERSION = "fmctl.dev/v1alpha1"
KIND = "Cluster"

Scheduler = Literal["slurm", "kubernetes"]
CapacityType = Literal["on-demand", "spot", "reservation", "capacity-block"]
FsxDeploymentType = Literal["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2"]
EksAddon = Literal[
    "vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent", "aws-fsx-csi-driver"
]
SlurmProvider = Literal["parallelcluster", "pcs"]
HealthRepair = Literal["replace", "reboot", "drain-only"]
BudgetActions = Literal["alert", "stop"]
IdleAction = Literal["alert", "scale-down"]
#: What scancel(1) may send a Capacity Block's running jobs before it ends (or none).
CheckpointSignal = Literal["USR1", "USR2", "TERM", "INT", "HUP", "none"]
PcsSize = Literal["SMALL", "MEDIUM", "LARGE"]
SlurmOs = Literal["alinux2023", "ubuntu2204", "ubuntu2404", "rhel8", "rhel9", "rocky8", "rocky9"]


class SpecModel(BaseModel):
    """Base for every spec section: strict types, camelCase keys, unknown keys rejected."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=False,
        frozen=True,
        # Build validators once, for the whole tree, on first use (halves start-up).
        defer_build=True,
    )


class Metadata(SpecModel):
    """Who the cluster is and where it lives."""

    name: str = Field(
        description="3-40 chars: lowercase letters, digits, '-'; starts with a letter."
    )
    region: str = Field(description="AWS region, e.g. us-east-1.")
    ttl: str | None = Field(
        None,
        description="Lifetime such as 8h or 3d; `fmctl gc --expired` "
        "tears the cluster down once it has passed.",
    )
    tags: dict[str, str] = Field(
        default_factory=dict, description="Tags copied onto every AWS resource."
    )


class Network(SpecModel):
    """One VPC, one availability zone: EFA and cluster placement groups need a single AZ."""

    availability_zone: str = Field(description="The AZ for every node, e.g. us-east-1a.")
    vpc_cidr: str | None = Field(None, description="CIDR of a new VPC (default 10.0.0.0/16).")
    vpc_id: str | None = Field(None, description="An existing VPC to reuse (with subnetId).")
    subnet_id: str | None = Field(None, description="An existing private subnet in the AZ.")
    public_subnet_id: str | None = Field(
        None, description="An existing public subnet (head node / load balancers); optional."
    )
    secondary_subnet_id: str | None = Field(
        None,
        description="Kubernetes with vpcId: an existing subnet in a second AZ (EKS control "
        "planes need two; no node runs there).",
    )
    ssh_cidr: str | None = Field(
        None, description="Who may reach the head node on port 22; absent means nobody (use SSM)."
    )
    api_cidrs: list[str] = Field(
        default_factory=list, description="Kubernetes: who may reach the public API endpoint."
    )


class HeadNode(SpecModel):
    """The Slurm head node (ParallelCluster)."""

    instance_type: str = Field(d.HEAD_NODE_INSTANCE_TYPE, description="EC2 instance type.")
    root_volume_gib: int = Field(
        d.HEAD_NODE_ROOT_GIB, alias="rootVolumeGiB", description="Encrypted gp3 root volume."
    )
    key_name: str | None = Field(
        None,
        description="An EC2 key pair for SSH to the head node (from network.sshCidr); "
        "without it, log in through SSM Session Manager.",
    )


class SystemNodes(SpecModel):
    """Kubernetes nodes for controllers, Prometheus and Grafana."""

    instance_type: str = Field(d.SYSTEM_NODE_INSTANCE_TYPE, description="EC2 instance type.")
    count: int = Field(d.SYSTEM_NODE_COUNT, description="Number of system nodes.")


class Capacity(SpecModel):
    """How the GPU instances of a pool are bought."""

    type: CapacityType = Field(
        d.CAPACITY_TYPE, description="on-demand | spot | reservation | capacity-block."
    )
    reservation_id: str | None = Field(
        None, description="cr-... id of the ODCR or Capacity Block (reservation, capacity-block)."
    )
    checkpoint_signal: CheckpointSignal = Field(
        d.CHECKPOINT_SIGNAL,
        description="capacity-block: the signal the pool's running jobs get an hour before "
        "the block ends, when its nodes stop taking new jobs (Slurm: every task of each job; "
        "EKS: every process on the nodes' GPUs; none: no signal).",
    )


class GpuPool(SpecModel):
    """A group of identical GPU instances: one Slurm queue or one EKS managed node group."""

    name: str = Field(description="Pool name: lowercase letters, digits, '-'.")
    instance_type: str = Field(description="A GPU instance type from `fmctl catalog`.")
    count: int = Field(description="Number of instances (the maximum when minCount is lower).")
    min_count: int | None = Field(
        None, description="Keep at least this many running; default: count (a static pool)."
    )
    capacity: Capacity = Field(default_factory=Capacity)
    efa: bool | None = Field(
        None,
        description="Attach every EFA interface; default: true where "
        "the instance type supports EFA.",
    )
    placement_group: bool | None = Field(
        None,
        description="Cluster placement group; default: true, except with a reservation "
        "or a capacity block.",
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description="Kubernetes node labels / Slurm features."
    )


class Drain(SpecModel):
    """What `up` does to the work on nodes a change takes away (a pool scaled in or
    removed): the nodes take no new work, then it waits for what runs there."""

    timeout: str = Field(
        d.DRAIN_TIMEOUT,
        description="How long `up` waits for a node's pods (EKS: evicted, their disruption "
        "budgets respected) or jobs (Slurm) to leave before it stops, the nodes left "
        "drained; like 30m, 2h. 0: no drain (what runs there ends with the node).",
    )
    jobs: Literal["wait", "requeue"] = Field(
        d.DRAIN_JOBS,
        description="Slurm: wait for running jobs to end, or requeue them (scontrol requeue).",
    )


class Compute(SpecModel):
    """All instances of the cluster."""

    head_node: HeadNode = Field(default_factory=HeadNode)
    system_nodes: SystemNodes = Field(default_factory=SystemNodes)
    gpu_pools: list[GpuPool] = Field(description="At least one GPU pool.")
    drain: Drain = Field(default_factory=Drain)


class S3Link(SpecModel):
    """An FSx data-repository association with S3."""

    import_path: str | None = Field(None, description="s3://bucket/prefix to import from.")
    export_path: str | None = Field(
        None, description="s3://bucket/prefix to export to; must be in the import bucket."
    )


class FsxLustre(SpecModel):
    """FSx for Lustre: a new file system, or an existing one by id."""

    file_system_id: str | None = Field(None, description="fs-... of an existing file system.")
    capacity_gib: int | None = Field(
        None,
        alias="capacityGiB",
        description="Storage capacity (GiB), in the deployment type's steps.",
    )
    deployment_type: FsxDeploymentType | None = Field(None, description="Default PERSISTENT_2.")
    throughput_per_tib: int | None = Field(
        None, alias="throughputPerTiB", description="MB/s per TiB (persistent types)."
    )
    mount_path: str = Field(d.FSX_MOUNT_PATH, description="Where nodes mount it.")
    s3: S3Link | None = None
    deletion_policy: Literal["delete", "retain"] = Field(
        d.FSX_DELETION_POLICY,
        description="What `down` does with the file system fmctl made: delete (with the data "
        "on it) | retain (kept, untagged from the cluster, with its security group).",
    )


class LocalNvme(SpecModel):
    """RAID0 over the instance-store NVMe drives."""

    mount_path: str = Field(d.LOCAL_NVME_MOUNT_PATH, description="Where the array is mounted.")


class Storage(SpecModel):
    """Shared and local storage."""

    fsx_lustre: FsxLustre | None = None
    local_nvme: LocalNvme | None = None


class Observability(SpecModel):
    """Prometheus + Grafana and the exporters."""

    prometheus: bool = True
    grafana: bool = True
    gpu_metrics: bool = True
    efa_metrics: bool = True
    amp_workspace_arn: str | None = Field(
        None,
        description="Amazon Managed Service for Prometheus workspace (ARN) the cluster's "
        "Prometheus also remote-writes to, for history that outlives the cluster.",
    )


class KubernetesSettings(SpecModel):
    """EKS settings (scheduler: kubernetes)."""

    version: str = Field(d.KUBERNETES_VERSION, description='EKS version, quoted: "1.33".')
    secrets_key_arn: str | None = Field(
        None,
        description="KMS key (ARN) that encrypts Kubernetes secrets; without it fmctl creates "
        "one for the cluster (and schedules its deletion on down).",
    )
    in_cluster_stack: Literal["fmctl", "gitops"] = Field(
        d.IN_CLUSTER_STACK,
        description="Who applies kubernetes/: fmctl (`up` applies and waits for it) | "
        "gitops (`up` makes everything on the AWS side and writes the filled folder; Argo CD "
        "or Flux applies it).",
    )
    control_plane_log_days: int = Field(
        d.CONTROL_PLANE_LOG_DAYS,
        ge=1,
        description="Days CloudWatch keeps the EKS control-plane logs (fmctl creates their "
        "log group with this retention; `down` deletes it unless --keep-logs).",
    )
    queueing: Literal["kueue", "none"] | None = Field(
        None,
        description="Who admits training jobs: kueue (fmctl installs Kueue; a job starts "
        "when all its pods fit, placed by the network topology) | none (pod by pod). "
        "Default: kueue when a GPU pool has more than one node.",
    )
    topology_placement: Literal["required", "preferred"] = Field(
        d.TOPOLOGY_PLACEMENT,
        description="queueing kueue: a job's pods must share the tightest network domain "
        "that holds them (required: it waits until one has room) or only should (preferred: "
        "Kueue widens the domain when it must).",
    )
    addon_versions: dict[EksAddon, str] = Field(
        default_factory=dict,
        description="Pinned EKS add-on versions (e.g. coredns: v1.12.3-eksbuild.1); others "
        "get the default version for the cluster's Kubernetes version.",
    )


class PcsSettings(SpecModel):
    """AWS Parallel Computing Service settings (slurm.provider: pcs): AWS runs slurmctld."""

    size: PcsSize = Field(
        d.PCS_SIZE,
        description="The controller's size, fixed at creation: SMALL (32 compute nodes, 256 "
        "jobs) | MEDIUM (512, 8,192) | LARGE (2,048, 16,384).",
    )
    slurm_version: str = Field(
        default_factory=d.pcs_slurm_version,
        description='Slurm major version, quoted ("25.11"); default: the newest PCS still '
        "creates clusters on and has a sample AMI for. A newer version on a live cluster is "
        "an upgrade in place (UpdateCluster); an older one is refused.",
    )
    accounting: Literal["none", "standard"] = Field(
        d.PCS_ACCOUNTING,
        description="Slurm accounting: none | standard (PCS runs slurmdbd; billed per hour).",
    )
    custom_settings: dict[str, str] = Field(
        default_factory=dict,
        description="Cluster-level slurmCustomSettings (slurm.conf parameters PCS accepts, "
        "e.g. SelectTypeParameters); Prolog and Epilog are fmctl's.",
    )
    login_count: int = Field(
        d.PCS_LOGIN_COUNT,
        ge=1,
        le=10,
        description="Login nodes (compute.headNode's instance type): Prometheus and Grafana run "
        "on the first.",
    )


class SlurmSettings(SpecModel):
    """ParallelCluster / Slurm settings (scheduler: slurm)."""

    provider: SlurmProvider = Field(
        d.SLURM_PROVIDER,
        description="Who runs Slurm: parallelcluster (a head node fmctl's ParallelCluster "
        "cluster owns) | pcs (AWS Parallel Computing Service runs the controller).",
    )
    ami_id: str | None = Field(
        None,
        description="provider pcs: the nodes' AMI (ami-...); without it, the AWS-published "
        "PCS sample AMI for the Slurm version and the pools' architecture.",
    )
    pcs: PcsSettings = Field(default_factory=PcsSettings)
    os: SlurmOs = Field(d.SLURM_OS, description="ParallelCluster image OS.")
    topology_aware: bool = Field(
        False,
        description="Write a Slurm topology.conf from the "
        "instance topology so jobs stay under one network spine.",
    )
    scaledown_idletime: int = Field(
        d.SLURM_SCALEDOWN_IDLETIME,
        ge=1,
        description="Minutes before idle dynamic nodes stop (at least 1; for nodes that never "
        "stop, set minCount).",
    )
    gpu_health_checks: bool = Field(
        False,
        description="ParallelCluster's GPU health check (DCGM) before each job. Off by default: "
        "it can hang the prolog on p4d/p5 (aws-parallelcluster#6777); fmctl's own prolog "
        "checks every GPU and EFA device in a few seconds either way.",
    )


class GitopsSettings(SpecModel):
    """Where the deployment folder is committed, for the Argo CD and Flux files ``render``
    writes (scheduler: kubernetes)."""

    repo_url: str | None = Field(
        None,
        description="The Git repository Argo CD and Flux read the folder from "
        "(https://... or ssh://...); without it the files hold <fmctl:gitRepoUrl>.",
    )
    revision: str = Field(d.GITOPS_REVISION, description="The branch (or tag) they follow.")
    path: str | None = Field(
        None,
        description="The folder's path inside the repository; by default the `render -o` "
        "folder's path from the root of the Git work tree that holds it.",
    )


class StateSettings(SpecModel):
    """Where the cluster's state and run lock live: this machine, or S3 for a team."""

    backend: Literal["local", "s3"] = Field(
        d.STATE_BACKEND, description="local (this machine's FMCTL_HOME) | s3 (shared)."
    )
    bucket: str | None = Field(
        None, description="The state bucket (backend s3; `fmctl state init s3://BUCKET/PREFIX`)."
    )
    prefix: str = Field(d.STATE_PREFIX, description="Key prefix in the bucket.")


class HealthVerify(SpecModel):
    """The verify gate a new or replaced GPU node passes before it takes work
    (ParallelCluster: slurm/lib/verify-node.sh, before slurmd starts)."""

    dcgm_level: int = Field(
        d.HEALTH_VERIFY_DCGM_LEVEL,
        ge=0,
        le=4,
        description="DCGM diagnostic level the node must pass (dcgmi diag -r: 1 quick, 2 "
        "medium, about 2 minutes, 3 long, 4 extended); 0 skips it. GPU, ECC and EFA checks "
        "always run.",
    )
    efa_loopback: bool = Field(
        True,
        description="Pass traffic through every EFA device to itself (fi_pingpong, as the EFA "
        "installer's efa_test.sh; about a second a device).",
    )
    nccl_pair: bool = Field(
        True,
        description="Slurm: once it has joined (reserved to itself, so no job lands on it), "
        "run a 2-node NCCL all-reduce with an idle healthy peer of its partition and hold it "
        "out of service until it reaches the pool's floor (the published 2-node baseline, "
        "else a share of EFA's line rate); a failing pair is run again with a second peer to "
        "tell a bad node from a bad peer.",
    )
    kubernetes_gate: bool | None = Field(
        None,
        description="EKS: new GPU nodes join with the taint fmctl.dev/unverified:NoSchedule "
        "and take work only once fmctl's verify controller has run the gate's node checks "
        "on them (a Job holding every GPU and EFA device: GPUs, ECC, NVLinks, row remapping, "
        "EFA devices and loopback, the DCGM diagnostic) and, where the pool pairs, a 2-node "
        "all-reduce with a verified node. Default: on wherever health is enabled; a node "
        "then takes work minutes later (DCGM level 2, and the DCGM and Deep Learning "
        "Container images pulled first). false: a node takes work once it is Ready. "
        "Slurm's gate is always on.",
    )


class Health(SpecModel):
    """fmctl's node health agent on the GPU nodes (Slurm: slurm/lib/health-agent.sh): a
    node-level fault drains the node through the scheduler."""

    enabled: bool = Field(True, description="Run the agent on every GPU node.")
    interval: str = Field(
        d.HEALTH_INTERVAL, description="How often it looks: 10s to 10m, like 30s or 2m."
    )
    max_in_repair: str | int = Field(
        d.HEALTH_MAX_IN_REPAIR,
        description="Nodes of a partition it may have drained at once, a count or a share "
        "(10%: at least one); beyond it, it only alerts.",
    )
    repair: HealthRepair = Field(
        d.HEALTH_REPAIR,
        description="What follows a node-level fault: replace (a new instance, every "
        "fault) | reboot (a reboot for the faults NVIDIA's catalog says a GPU reset or "
        "restart cures, verified before the node takes work again; a new instance for the "
        "rest) | drain-only (drained and left for a person: PCS only).",
    )
    verify: HealthVerify = Field(default_factory=HealthVerify)
    kubernetes_agent: bool | None = Field(
        None,
        description="EKS: fmctl's node health agent on every GPU node (a DaemonSet: the "
        "Slurm agent's looks, reported as the node condition FmctlHealthy), and fmctl's "
        "controller taking a node it finds faulty out of service and replacing it, within "
        "maxInRepair; default: on wherever health is enabled. false leaves the loop to AWS's "
        "node monitoring agent and node auto repair.",
    )

    def interval_seconds(self) -> int | None:
        """The interval in seconds (``30s``, ``2m``); None when malformed."""
        match = re.match(r"^(\d+)(s|m)$", self.interval.strip())
        if not match:
            return None
        return int(match.group(1)) * (60 if match.group(2) == "m" else 1)


class Budget(SpecModel):
    """An AWS Budgets budget over what the cluster's tagged resources cost (the
    ``fmctl.dev/cluster`` cost allocation tag), kept by AWS whether or not anyone runs
    fmctl."""

    monthly: float | None = Field(
        None, description="USD a calendar month (the budget resets on the 1st); or total."
    )
    total: float | None = Field(
        None,
        description="USD over the cluster's life, counted from the day `up` made the budget "
        "(AWS Budgets counts it by the year: a cluster older than a year starts again).",
    )
    actions: BudgetActions = Field(
        d.BUDGET_ACTIONS,
        description="alert: notify at 80% and 100% | stop: also scale every GPU pool to zero "
        "at 100%, through the scheduler's own API.",
    )
    notify: list[str] = Field(
        default_factory=list,
        description="Who hears of it: email addresses (10 at most) and one SNS topic ARN "
        "(its policy must let budgets.amazonaws.com publish).",
    )

    def limit(self) -> float | None:
        """The limit in USD, whichever of monthly or total is set."""
        return self.monthly if self.monthly is not None else self.total


class Idle(SpecModel):
    """What fmctl does with a GPU node that works for nobody: every GPU's engine under 5%
    busy and no job on the node (the GpuNodeIdle alert's test)."""

    after: str = Field(
        d.IDLE_AFTER,
        description="How long a node stays idle before it counts: 30m, 1h, 2h30m (10m at "
        "least). Without cost.idle the alert fires after 30m.",
    )
    action: IdleAction = Field(
        d.IDLE_ACTION,
        description="alert: GpuNodeIdle fires | scale-down: the on-demand and spot pools' "
        "nodes also go once idle that long, and come back when jobs need them (on Slurm its "
        "own power saving; on EKS the Cluster Autoscaler, Kueue asking it for a queued job's "
        "nodes); reserved capacity, paid anyway, only alerts.",
    )


class Cost(SpecModel):
    """What the cluster may spend."""

    budget: Budget | None = None
    idle: Idle | None = None


class ClusterSpec(SpecModel):
    """A whole cluster: ``apiVersion: fmctl.dev/v1alpha1``, ``kind: Cluster``."""

    api_version: Literal["fmctl.dev/v1alpha1"] = Field(description="Always fmctl.dev/v1alpha1.")
    kind: Literal["Cluster"]
    metadata: Metadata
    scheduler: Scheduler = Field(
        d.SCHEDULER, description="slurm | kubernetes; --scheduler overrides it."
    )
    network: Network
    compute: Compute
    storage: Storage = Field(default_factory=Storage)
    observability: Observability = Field(default_factory=Observability)
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    gitops: GitopsSettings = Field(default_factory=GitopsSettings)
    health: Health = Field(default_factory=Health)
    cost: Cost = Field(default_factory=Cost)
    state: StateSettings = Field(
        default_factory=StateSettings,
        description="Where state and lock live; FMCTL_STATE=s3://B/P when the spec says none.",
    )
