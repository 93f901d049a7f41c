"""The infrastructure both schedulers share: network, security groups, placement groups, the
artifact bucket, FSx for Lustre, and the IAM the schedulers' nodes need."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from dataclasses import dataclass, field
from typing import Any, TypeVar

from provisioner.blueprint.model import BlueprintError
from provisioner.graph.ref import Ref
from provisioner.render.context import ClusterContext
from provisioner.resources.base import Kind, Planned
from provisioner.resources.compute import (
    ANYWHERE,
    LUSTRE_PORTS,
    PlacementGroup,
    PlacementGroupOut,
    PlacementGroupParams,
    Rule,
    SecurityGroup,
    SgOut,
    SgParams,
)
from provisioner.resources.fsx import (
    DELETION_POLICY_TAG,
    ExistingFileSystem,
    ExistingFsxParams,
    FileSystem,
    FsxOut,
    FsxParams,
)
from provisioner.resources.fsx_dra import DraParams, RepositoryLink
from provisioner.resources.gateways import (
    EipOut,
    EipParams,
    ElasticIp,
    IgwOut,
    IgwParams,
    InternetGateway,
    NatGateway,
    NatOut,
    NatParams,
)
from provisioner.resources.iam import (
    ACCOUNT,
    ManagedPolicy,
    PolicyParams,
    Role,
    RoleOut,
    RoleParams,
    canonical,
    role_name,
)
from provisioner.resources.network import (
    ExistingSubnet,
    ExistingSubnetParams,
    ExistingVpc,
    ExistingVpcParams,
    Subnet,
    SubnetOut,
    SubnetParams,
    Vpc,
    VpcOut,
    VpcParams,
)
from provisioner.resources.pcluster_check import CheckOut
from provisioner.resources.registry import kinds
from provisioner.resources.routes import (
    EndpointOut,
    EndpointParams,
    RouteTable,
    RouteTableOut,
    RouteTableParams,
    S3Endpoint,
)
from provisioner.resources.storage import (
    Artifacts,
    ArtifactsParams,
    Bucket,
    BucketOut,
    BucketParams,
)
from provisioner.resources.tags import DesiredTags
from provisioner.shipped import shipped_dir
from provisioner.spec.defaults import FSX_DEPLOYMENT_TYPE
from provisioner.spec.model import ClusterSpec

T = TypeVar("T")
P = TypeVar("P")
Out = TypeVar("Out")

#: What each role may do: trusted service, AWS-managed policies. Nothing broader.
ROLES: dict[str, tuple[str | tuple[str, ...], tuple[str, ...]]] = {
    "eks-cluster": ("eks.amazonaws.com", ("AmazonEKSClusterPolicy",)),
    "eks-node": (
        "ec2.amazonaws.com",
        (
            "AmazonEKSWorkerNodePolicy",
            "AmazonEKS_CNI_Policy",
            "AmazonEC2ContainerRegistryReadOnly",
            "AmazonSSMManagedInstanceCore",
        ),
    ),
    # EKS Pod Identity: the FSx CSI controller's service account (dynamic provisioning);
    # an inline policy scoped to what the driver calls (AmazonFSxFullAccess is far wider).
    "fsx-csi": ("pods.eks.amazonaws.com", ()),
    # Prometheus on EKS remote-writing to Amazon Managed Service for Prometheus; its inline
    # policy names the spec's workspace (``amp_write_policy``).
    "prometheus-amp": ("pods.eks.amazonaws.com", ()),
    # The Cluster Autoscaler on EKS (cost.idle scale-down); its inline policy may change only
    # the Auto Scaling groups tagged for the cluster (``catalog.autoscaler.policy``).
    "cluster-autoscaler": ("pods.eks.amazonaws.com", ()),
    # fmctl's verify controller on EKS (health.verify.kubernetesGate with health.repair:
    # replace); its inline policy may terminate instances only in the Auto Scaling groups
    # tagged for the cluster's gate (``catalog.eks_repair.verify_repair_policy``).
    "verify-repair": ("pods.eks.amazonaws.com", ()),
    # AWS PCS nodes (login and compute): SSM for `fmctl check`; the rest is inline.
    "pcs-node": ("ec2.amazonaws.com", ("AmazonSSMManagedInstanceCore",)),
    # EventBridge Scheduler running the ttl's schedules (``blueprint.expiry``): inline only,
    # the one call per scheduler that stops the cluster's node groups.
    "ttl-scheduler": ("scheduler.amazonaws.com", ()),
    # The budget's stop function (``blueprint.budget``): inline only, the same calls as the
    # ttl's schedules, and writing to its own log group.
    "budget-stop": ("lambda.amazonaws.com", ()),
    # A Capacity Block's wind-down (``blueprint.blocks``): Scheduler's T-60 schedules and the
    # EventBridge rule on EC2's T-40 warning both send Run Command to the controller host.
    "block-end": (("scheduler.amazonaws.com", "events.amazonaws.com"), ()),
    # On EKS only the T-60 schedule, tainting the block's node groups.
    "block-taint": ("scheduler.amazonaws.com", ()),
}
#: The PCS nodes' inline policy: registering with the cluster (what AWS's
#: AWSPCSComputeNodePolicy grants), reading the uploaded scripts and writing `fmctl check`'s
#: Run Command output under NAME-check/ (the bucket, filled per cluster by
#: ``blueprint.pcs``), and finding the cluster's nodes by tag for Prometheus's EC2 discovery
#: (DescribeInstances takes no resource-level permission).
INLINE_PCS_NODE: dict[str, Any] = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Sid": "Register",
            "Effect": "Allow",
            "Action": ["pcs:RegisterComputeNodeGroupInstance"],
            "Resource": "*",
        },
        {
            "Sid": "Scripts",
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:ListBucket"],
            "Resource": [],
        },
        {
            "Sid": "CheckOutput",
            "Effect": "Allow",
            "Action": ["s3:PutObject"],
            "Resource": [],
        },
        {
            "Sid": "Discovery",
            "Effect": "Allow",
            "Action": ["ec2:DescribeInstances"],
            "Resource": "*",
        },
    ],
}
#: Inline policies, by role: named actions only, never "*".
INLINE: dict[str, dict[str, Any]] = {
    "fsx-csi": {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "FileSystems",
                "Effect": "Allow",
                "Action": [
                    "fsx:CreateFileSystem",
                    "fsx:DeleteFileSystem",
                    "fsx:DescribeFileSystems",
                    "fsx:UpdateFileSystem",
                    "fsx:TagResource",
                ],
                "Resource": "*",
            },
            {
                "Sid": "LinkedRoles",
                "Effect": "Allow",
                "Action": ["iam:CreateServiceLinkedRole"],
                "Resource": "*",
                "Condition": {
                    "StringLike": {
                        "iam:AWSServiceName": [
                            "fsx.amazonaws.com",
                            "s3.data-source.lustre.fsx.amazonaws.com",
                        ]
                    }
                },
            },
            {
                "Sid": "LinkedRolePolicies",
                "Effect": "Allow",
                "Action": ["iam:AttachRolePolicy", "iam:PutRolePolicy"],
                "Resource": "arn:aws:iam::*:role/aws-service-role/"
                "s3.data-source.lustre.fsx.amazonaws.com/*",
            },
        ],
    }
}
#: Pod Identity assumes roles with session tags.
TAG_SESSION_SERVICES = ("pods.eks.amazonaws.com",)


def amp_write_policy(workspace_arn: str) -> dict[str, Any]:
    """aps:RemoteWrite on one workspace: all Prometheus needs to send samples."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "RemoteWrite",
                "Effect": "Allow",
                "Action": ["aps:RemoteWrite"],
                "Resource": workspace_arn,
            }
        ],
    }


@dataclass
class Parts:
    """The resources planned so far, and what the builders share."""

    spec: ClusterSpec
    c: ClusterContext
    items: list[Planned] = field(default_factory=list)
    #: The shared state's URL, which every resource is created carrying (``STATE_TAG``).
    state: str | None = None

    def add(self, rid: str, kind: type[Kind[P, Out, Any]], params: P, **origins: str) -> Ref[Out]:
        """Plan a resource of ``kind`` (``origins``: live field -> spec path it comes from);
        a reference to its outputs. mypy checks ``params`` against the kind's; run time, too
        (a kind's params are a class of their own)."""
        if not isinstance(params, kind.params):
            raise BlueprintError(
                f"{rid}: a {kind.name} takes {kind.params.__name__}, not {type(params).__name__}"
            )
        if self.has(rid):
            raise BlueprintError(f"{rid} is planned twice")
        self.items.append(Planned(rid, kind.name, params, origins))
        made: Ref[Out] = Ref(rid, kind.outputs)
        return made

    def has(self, rid: str) -> bool:
        """True when ``rid`` is planned."""
        return any(i.id == rid for i in self.items)

    def ref(self, rid: str, outputs: type[T]) -> Ref[T]:
        """A reference to a planned resource, whose kind must give ``outputs``: a reference
        to the wrong kind fails the plan's build, before any AWS call."""
        found = next((i for i in self.items if i.id == rid), None)
        if found is None:
            raise KeyError(f"{rid} is not planned")
        given = kinds()[found.kind].outputs
        if given is not outputs:
            raise BlueprintError(
                f"{rid} is a {found.kind}: its outputs are {given.__name__}, not {outputs.__name__}"
            )
        return Ref(rid, outputs)

    def maybe(self, rid: str, outputs: type[T]) -> Ref[T] | None:
        """A reference, or None when ``rid`` is not planned."""
        return self.ref(rid, outputs) if self.has(rid) else None

    def tags(self, rid: str) -> DesiredTags:
        """The tags resource ``rid`` must carry."""
        from provisioner.validate.rules.general import parse_ttl

        meta = self.spec.metadata
        ttl = parse_ttl(meta.ttl) if meta.ttl else None
        return DesiredTags(tuple(sorted(meta.tags.items())), meta.name, rid, ttl, state=self.state)

    def global_tags(self, rid: str) -> DesiredTags:
        """The tags of an object in an account-wide namespace (IAM): the region too, which
        find_owned checks (resources.iam.owned_here)."""
        return dataclasses.replace(self.tags(rid), region=self.spec.metadata.region)

    def role(
        self,
        rid: str,
        role: str,
        inline: dict[str, Any] | None = None,
        path: str = "/",
        sources: tuple[str, ...] = (),
        pods: tuple[str, str] | None = None,
    ) -> None:
        """Plan one of fmctl's IAM roles. ``sources``: the ARNs (``ACCOUNT`` where the
        account goes, ``*`` where a part is not known) of what alone may have the service
        assume it, the confused-deputy conditions ``aws:SourceArn`` and
        ``aws:SourceAccount`` AWS recommends (EventBridge Scheduler: its schedule group;
        EventBridge: the rule; the services' User Guides, "Confused deputy prevention").
        ``pods``: (namespace, service account) of the only pods, in this cluster only, that
        EKS Pod Identity may hand the role to, by the session tags it adds when it assumes
        the role (the EKS User Guide, "Create IAM role with trust policy required by EKS Pod
        Identity", and its list of session tags: eks-cluster-name, kubernetes-namespace,
        kubernetes-service-account among them)."""
        service, managed = ROLES[role]
        actions: Any = (
            ["sts:AssumeRole", "sts:TagSession"]
            if service in TAG_SESSION_SERVICES
            else "sts:AssumeRole"
        )
        principal = service if isinstance(service, str) else list(service)
        statement: dict[str, Any] = {
            "Effect": "Allow",
            "Principal": {"Service": principal},
            "Action": actions,
        }
        if sources:
            statement["Condition"] = {
                "StringEquals": {"aws:SourceAccount": ACCOUNT},
                "ArnLike": {"aws:SourceArn": list(sources)},
            }
        if pods is not None:
            statement["Condition"] = {
                "StringEquals": {
                    "aws:RequestTag/eks-cluster-name": self.c.name,
                    "aws:RequestTag/kubernetes-namespace": pods[0],
                    "aws:RequestTag/kubernetes-service-account": pods[1],
                }
            }
        trust = {"Version": "2012-10-17", "Statement": [statement]}
        document = inline or INLINE.get(role)
        self.add(
            rid,
            Role,
            RoleParams(
                role_name=role_name(self.c.name, self.c.region, role),
                trust=canonical(trust),
                managed=managed,
                inline_name=f"fmctl-{role}",
                inline=canonical(document) if document else None,
                instance_profile=service == "ec2.amazonaws.com",
                description=f"fmctl {self.c.name} ({self.c.region}): {role}",
                tags=self.global_tags(rid),
                path=path,
            ),
        )


def _blocks(cidr: str) -> list[str]:
    """Four equal blocks of the VPC: private (nodes), public, secondary AZ, spare."""
    return [str(b) for b in ipaddress.ip_network(cidr).subnets(prefixlen_diff=2)]


def network(p: Parts) -> None:
    """The VPC, subnets and ways out; or the existing VPC and subnets the spec names."""
    c, net = p.c, p.spec.network
    if c.vpc_cidr is None:  # reuse: look the VPC and subnets up, never change them
        p.add("vpc", ExistingVpc, ExistingVpcParams(net.vpc_id or ""))
        vpc = p.ref("vpc", VpcOut)
        p.add("subnet/private", ExistingSubnet, ExistingSubnetParams(vpc, net.subnet_id or ""))
        if net.public_subnet_id:
            p.add("subnet/public", ExistingSubnet, ExistingSubnetParams(vpc, net.public_subnet_id))
        if c.scheduler == "kubernetes":  # looked up, so a wrong id stops `up` at once
            p.add(
                "subnet/secondary",
                ExistingSubnet,
                ExistingSubnetParams(vpc, net.secondary_subnet_id or ""),
            )
        return
    private, public, secondary, _ = _blocks(c.vpc_cidr)
    cidr, az = "network.vpcCidr", "network.availabilityZone"
    p.add("vpc", Vpc, VpcParams(c.vpc_cidr, p.tags("vpc")), cidr=cidr)
    vpc = p.ref("vpc", VpcOut)
    p.add("igw", InternetGateway, IgwParams(vpc, p.tags("igw")))
    for rid, block, public_ip in (
        ("subnet/private", private, False),
        ("subnet/public", public, True),
    ):
        params = SubnetParams(vpc, block, p.tags(rid), az=c.availability_zone, public=public_ip)
        p.add(rid, Subnet, params, cidr=cidr, az=az)
    if c.scheduler == "kubernetes":
        params = SubnetParams(
            vpc, secondary, p.tags("subnet/secondary"), avoid_az=c.availability_zone
        )
        p.add("subnet/secondary", Subnet, params, cidr=cidr, az=az)
    p.add("eip/nat", ElasticIp, EipParams(p.tags("eip/nat")))
    igw = p.ref("igw", IgwOut)
    nat = NatParams(
        p.ref("subnet/public", SubnetOut), p.ref("eip/nat", EipOut), igw, p.tags("natgw")
    )
    p.add("natgw", NatGateway, nat, subnet=az)
    routes: tuple[tuple[str, Ref[IgwOut] | Ref[NatOut], str], ...] = (
        ("route-table/public", igw, "subnet/public"),
        ("route-table/private", p.ref("natgw", NatOut), "subnet/private"),
    )
    for rid, target, subnet in routes:
        table = RouteTableParams(vpc, target, (p.ref(subnet, SubnetOut),), p.tags(rid))
        p.add(rid, RouteTable, table)
    endpoint = EndpointParams(
        vpc, (p.ref("route-table/private", RouteTableOut),), p.tags("s3-endpoint")
    )
    p.add("s3-endpoint", S3Endpoint, endpoint)


def way_out(p: Parts) -> tuple[tuple[Ref[RouteTableOut], ...], Ref[EndpointOut] | None]:
    """What nodes in the private subnet need to download at bootstrap (none planned when the
    spec reuses a VPC: its routes are the user's)."""
    routes = tuple(p.ref(rid, RouteTableOut) for rid in ("route-table/private",) if p.has(rid))
    return routes, p.maybe("s3-endpoint", EndpointOut)


def shared(p: Parts) -> None:
    """Security groups, placement groups, the bucket and its uploads, FSx, IAM."""
    c = p.c
    vpc = p.ref("vpc", VpcOut)
    everything = Rule("-1")
    efa = SgParams(
        vpc,
        f"{c.name}-efa",
        f"fmctl {c.name}: efa",
        ingress=(everything,),
        egress=(everything, Rule("-1", cidr=ANYWHERE)),
        tags=p.tags("sg/efa"),
    )
    p.add("sg/efa", SecurityGroup, efa)
    for index, pool in enumerate(c.pools):
        if pool.placement_group:
            rid = f"placement-group/{pool.name}"
            params = PlacementGroupParams(pool.placement_group_name, p.tags(rid))
            p.add(rid, PlacementGroup, params, strategy=f"compute.gpuPools[{index}].placementGroup")
    p.add("bucket", Bucket, BucketParams(p.tags("bucket")))
    if c.scheduler == "kubernetes":  # ParallelCluster makes its own, scoped by S3Access
        p.role("iam/eks-cluster", "eks-cluster")
        p.role("iam/eks-node", "eks-node")
    if c.scheduler == "slurm":
        _slurm_shared(p)


def _slurm_shared(p: Parts) -> None:
    from provisioner.render.slurm import health_env, monitoring_files, topology_conf

    c = p.c
    if c.amp_workspace_arn:
        # aps:RemoteWrite on this workspace only, for the head node's Prometheus.
        name = role_name(c.name, c.region, "amp-write")
        policy = PolicyParams(
            name,
            canonical(amp_write_policy(c.amp_workspace_arn)),
            f"fmctl {c.name} ({c.region}): amp-write",
            p.global_tags("iam/amp-write"),
        )
        p.add("iam/amp-write", ManagedPolicy, policy)
    uploads = monitoring_files(c)
    uploads["slurm/health.env"] = health_env(c)  # the health agent's settings (spec health:)
    if c.topology_aware:
        # The provisional tree the head node's OnNodeStart puts in place before slurmctld.
        uploads["slurm/topology.conf"] = topology_conf(c)
    extra = tuple(sorted((k.removeprefix("slurm/"), v) for k, v in uploads.items()))
    artifacts = ArtifactsParams(p.ref("bucket", BucketOut), str(shipped_dir("slurm")), extra)
    p.add("artifacts", Artifacts, artifacts)


def storage(p: Parts, gate: Ref[CheckOut] | None = None) -> None:
    """FSx for Lustre (after ``gate``: ParallelCluster's early validators, on Slurm)."""
    fsx = p.c.fsx
    if fsx is None:
        return
    if fsx.existing_id:
        p.add("fsx", ExistingFileSystem, ExistingFsxParams(fsx.existing_id))
        return
    efa = p.ref("sg/efa", SgOut)
    rules = tuple(
        Rule("tcp", low, high, group)
        for low, high in LUSTRE_PORTS
        for group in (efa, None)  # from the nodes, and to and from itself
    )
    group = SgParams(
        p.ref("vpc", VpcOut),
        f"{p.c.name}-fsx",
        f"fmctl {p.c.name}: fsx",
        ingress=rules,
        egress=rules,
        tags=p.tags("sg/fsx"),
    )
    p.add("sg/fsx", SecurityGroup, group)
    at = "storage.fsxLustre"
    tags = p.tags("fsx")
    if fsx.retain:
        # Said on the file system itself: `down` works from tags alone.
        tags = dataclasses.replace(tags, spec=(*tags.spec, (DELETION_POLICY_TAG, "retain")))
    params = FsxParams(
        subnet=p.ref("subnet/private", SubnetOut),
        security_group=p.ref("sg/fsx", SgOut),
        capacity_gib=int(fsx.capacity_gib or 0),
        deployment_type=fsx.deployment_type or FSX_DEPLOYMENT_TYPE,
        tags=tags,
        throughput_per_tib=fsx.throughput_per_tib,
        import_path=fsx.import_path,
        export_path=fsx.export_path,
        gate=gate,
    )
    p.add(
        "fsx",
        FileSystem,
        params,
        subnet="network.availabilityZone",
        deployment_type=f"{at}.deploymentType",
        capacity_gib=f"{at}.capacityGiB",
        throughput_per_tib=f"{at}.throughputPerTiB",
        import_path=f"{at}.s3.importPath",
        export_path=f"{at}.s3.exportPath",
    )
    if fsx.uses_dra:
        for link in fsx.links:
            rid = f"dra/{link.name}"
            dra = DraParams(
                p.ref("fsx", FsxOut),
                link.file_system_path,
                link.s3_path,
                link.auto_import,
                link.auto_export,
                p.tags(rid),
            )
            p.add(rid, RepositoryLink, dra, s3_path=f"{at}.s3", file_system_path=f"{at}.s3")


def placement_ref(p: Parts, pool: str) -> Ref[PlacementGroupOut] | None:
    """The pool's placement group, when it has one."""
    return p.maybe(f"placement-group/{pool}", PlacementGroupOut)


def schedule_group_source(p: Parts, group: str) -> str:
    """A schedule group as a trust policy's ``aws:SourceArn`` (what Scheduler passes)."""
    return f"arn:aws:scheduler:{p.c.region}:{ACCOUNT}:schedule-group/{group}"


def rule_source(p: Parts, rule: str) -> str:
    """An EventBridge rule as a trust policy's ``aws:SourceArn`` (what EventBridge passes
    for a rule's target)."""
    return f"arn:aws:events:{p.c.region}:{ACCOUNT}:rule/{rule}"


def role_ref(p: Parts, rid: str) -> Ref[RoleOut]:
    """A planned role."""
    return p.ref(rid, RoleOut)


def dumps(value: Any) -> str:
    """Canonical JSON (stable digests of what is sent)."""
    return json.dumps(value, sort_keys=True)
