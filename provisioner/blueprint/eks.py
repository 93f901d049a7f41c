"""The EKS side of a Kubernetes cluster, read off the files ``render`` writes under ``aws/``
(the same files a user commits), so what `up` sends is what `render` shows.

Each file is taken apart strictly: a key the resource model does not know is an error (a
template and the model can never drift apart silently), and every ``<fmctl:...>``
placeholder becomes a reference to the resource that fills it.

Order, and why:
- the secrets key, the control plane (10 minutes) as soon as its subnets, group and role
  exist, in parallel with FSx (10 + 7 minutes);
- the node role's access entry and the caller's admin entry once the cluster is ACTIVE;
- launch templates early (seconds, no cost), node groups (5 minutes) in parallel once the
  cluster and the network's NAT route exist (nodes need it to join);
- add-ons once the system node group is ACTIVE (they run pods; GPU groups are tainted, so
  they wait for no GPU group);
- the in-cluster stack once everything it runs on and mounts exists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from provisioner.blueprint.files import launch_template, load, tags_match
from provisioner.blueprint.infra import Parts, amp_write_policy, way_out
from provisioner.blueprint.model import BlueprintError, Where
from provisioner.graph.ref import After, Ref
from provisioner.render.context import ClusterContext
from provisioner.render.placeholders import PATTERN
from provisioner.resources.compute import SgOut
from provisioner.resources.eks import EksCluster, EksOut, EksParams
from provisioner.resources.eks_access import ADMIN_POLICY, AccessEntry, AccessOut, AccessParams
from provisioner.resources.eks_addons import (
    Addon,
    AddonOut,
    AddonParams,
    IdentityOut,
    IdentityParams,
    PodIdentity,
)
from provisioner.resources.eks_nodegroup_model import (
    NodegroupOut,
    NodegroupParams,
    NodeRepair,
    Scaling,
    Taint,
)
from provisioner.resources.eks_nodes import Nodegroup
from provisioner.resources.fsx import FsxOut
from provisioner.resources.iam import RoleOut
from provisioner.resources.kms import KmsKey, KmsOut, KmsParams
from provisioner.resources.kube_chart import ChartOut, ChartParams, KubeChart
from provisioner.resources.kube_health import PoolCheck
from provisioner.resources.kube_stack import KubeStack, StackParams
from provisioner.resources.launch_template import LtOut
from provisioner.resources.logs import LogGroup, LogGroupOut, LogGroupParams, control_plane_group
from provisioner.resources.network import SubnetOut

if TYPE_CHECKING:
    from provisioner.resources.eks import AuthenticationMode, SupportType

#: Add-ons whose pods run on nodes, in the order EKS documents them.
ADDONS = (
    "vpc-cni",
    "kube-proxy",
    "coredns",
    "eks-pod-identity-agent",
    "aws-fsx-csi-driver",
    "eks-node-monitoring-agent",
)
#: Service account of the FSx CSI controller (its pod identity association).
FSX_CSI_ACCOUNT = "fsx-csi-controller-sa"


class Refs:
    """Placeholder names (and ids the spec names) -> the resources that fill them."""

    def __init__(self, p: Parts) -> None:
        self.by_name: dict[str, Ref[Any]] = {}
        self.literal: dict[str, Ref[Any]] = {}
        for name, rid, outputs in (
            ("privateSubnetId", "subnet/private", SubnetOut),
            ("publicSubnetId", "subnet/public", SubnetOut),
            ("secondarySubnetId", "subnet/secondary", SubnetOut),
            ("efaSecurityGroupId", "sg/efa", SgOut),
            ("fsxSecurityGroupId", "sg/fsx", SgOut),
            ("clusterRoleArn", "iam/eks-cluster", RoleOut),
            ("nodeRoleArn", "iam/eks-node", RoleOut),
        ):
            if p.has(rid):
                self.by_name[name] = Ref(rid, outputs)
        for pool in p.c.pools:
            self.by_name[f"launchTemplate.{pool.name}"] = Ref(f"launch-template/{pool.name}", LtOut)
        net = p.spec.network
        for value, rid in (
            (net.subnet_id, "subnet/private"),
            (net.public_subnet_id, "subnet/public"),
            (net.secondary_subnet_id, "subnet/secondary"),
        ):
            if value and p.has(rid):
                self.literal[value] = Ref(rid, SubnetOut)

    def __call__(self, value: Any, where: str) -> Ref[Any]:
        text = str(value)
        match = PATTERN.fullmatch(text)
        if match and match.group(1) in self.by_name:
            return self.by_name[match.group(1)]
        if text in self.literal:
            return self.literal[text]
        raise BlueprintError(
            f"{where}: {text!r} is neither a placeholder fmctl fills nor a known id"
        )


def cluster(p: Parts, where: Where) -> None:
    """The EKS control plane, its access, nodes, add-ons and the in-cluster stack."""
    from provisioner.render.kubernetes import render_kubernetes

    files = render_kubernetes(p.c)
    refs = Refs(p)
    _control_plane(p, files, refs)
    eks = p.ref("eks", EksOut)
    nodes = p.ref("iam/eks-node", RoleOut)
    p.add(
        "access/nodes",
        AccessEntry,
        AccessParams(eks, nodes, "EC2_LINUX", p.tags("access/nodes")),
    )
    admin = AccessParams(eks, None, "STANDARD", p.tags("access/admin"), ADMIN_POLICY)
    p.add("access/admin", AccessEntry, admin)
    _nodegroup(p, files, refs, "system", None)
    for index, pool in enumerate(p.c.pools):
        launch_template(p, files, refs, pool.name)
        _nodegroup(p, files, refs, pool.name, index)
    _addons(p)
    if p.c.autoscaled_pools:
        _autoscaler(p)
    if p.c.verify_replaces:
        _verify_repair(p)
    if p.spec.kubernetes.in_cluster_stack == "fmctl":  # else Argo CD or Flux installs them
        _charts(p, files)
    _stack(p, files, where)


def _autoscaler(p: Parts) -> None:
    """The Cluster Autoscaler's role, which its pods assume (EKS Pod Identity): made before
    the stack runs it."""
    from provisioner.catalog import autoscaler

    _pod_role(
        p,
        "cluster-autoscaler",
        autoscaler.policy(p.c.name),
        (autoscaler.NAMESPACE, autoscaler.SERVICE_ACCOUNT),
    )


def _verify_repair(p: Parts) -> None:
    """The verify controller's role, which its pod assumes (EKS Pod Identity) to replace a
    node that failed the gate: made before the stack runs the controller (the webhook gives
    a pod its credentials when the pod is created)."""
    from provisioner.catalog import eks_repair

    _pod_role(
        p,
        "verify-repair",
        eks_repair.verify_repair_policy(p.c.name),
        (eks_repair.VERIFY_NAMESPACE, eks_repair.VERIFY_SERVICE_ACCOUNT),
    )


def _pod_role(p: Parts, role: str, policy: dict[str, object], pods: tuple[str, str]) -> None:
    """One of fmctl's roles (``iam/ROLE``) for the pods of one service account, and its
    pod identity association (``pod-identity/ROLE``)."""
    p.role(f"iam/{role}", role, policy, pods=pods)
    identity = IdentityParams(
        p.ref("eks", EksOut),
        pods[0],
        pods[1],
        p.ref(f"iam/{role}", RoleOut),
        p.ref("addon/eks-pod-identity-agent", AddonOut),
        p.tags(f"pod-identity/{role}"),
    )
    p.add(f"pod-identity/{role}", PodIdentity, identity)


def _charts(p: Parts, files: dict[str, str]) -> None:
    """The upstream charts (Kueue, NVIDIA's DRA driver), with the values render wrote (and
    the CRDs they need served as they start), on the system nodes."""
    from provisioner.drivers.helm import ChartRef
    from provisioner.render.kubernetes import chart_installs

    for install in chart_installs(p.c):
        ch = install.chart
        params = ChartParams(
            cluster=p.ref("eks", EksOut),
            chart=ChartRef(ch.name, ch.version, ch.repository, ch.release, ch.namespace),
            values=install.values,
            kube_version=p.c.kubernetes_version,
            pod_security=install.pod_security,
            admin=p.ref("access/admin", AccessOut),
            nodegroups=(p.ref("nodegroup/system", NodegroupOut),),
            crds="".join(f"---\n{files[path]}" for path in install.crds),
        )
        p.add(f"chart/{ch.name}", KubeChart, params, version="kubernetes.queueing")


def _control_plane(p: Parts, files: dict[str, str], refs: Refs) -> None:
    path = "aws/eks-cluster.yaml"
    doc = load(files, path)
    key_arn = p.spec.kubernetes.secrets_key_arn
    key: Ref[KmsOut] | str
    if key_arn is None:
        p.add(
            "kms/secrets",
            KmsKey,
            KmsParams(f"fmctl {p.c.name}: EKS secrets encryption", p.tags("kms/secrets")),
        )
        key = p.ref("kms/secrets", KmsOut)
    else:
        key = key_arn
    vpc = doc.sub("resourcesVpcConfig")
    access = doc.sub("accessConfig")
    logging = doc.sub("logging")
    enabled = [t for e in logging.take("clusterLogging") if e.get("enabled") for t in e["types"]]
    logging.done()
    log_group = None
    if enabled:
        # Made first, so EKS writes to a group with a retention that `down` deletes.
        group = LogGroupParams(
            control_plane_group(p.c.name),
            p.spec.kubernetes.control_plane_log_days,
            p.tags("log-group/control-plane"),
        )
        p.add(
            "log-group/control-plane",
            LogGroup,
            group,
            retention_days="kubernetes.controlPlaneLogDays",
        )
        log_group = p.ref("log-group/control-plane", LogGroupOut)
    encryption = doc.take("encryptionConfig")
    if [e["resources"] for e in encryption] != [["secrets"]]:
        raise BlueprintError(f"{path}: encryptionConfig is not the secrets key fmctl manages")
    upgrade = doc.sub("upgradePolicy")
    addons = doc.take("addons")
    if [a for a in addons if a not in ADDONS]:
        raise BlueprintError(f"{path}: add-ons {addons} beyond {ADDONS}")
    tags_match(p, doc, path)
    params = EksParams(
        cluster_name=str(doc.take("name")),
        version=str(doc.take("version")),
        role=refs(doc.take("roleArn"), f"{path}.roleArn"),
        subnets=tuple(refs(s, f"{path}.subnetIds") for s in vpc.take("subnetIds")),
        security_groups=tuple(
            refs(g, f"{path}.securityGroupIds") for g in vpc.take("securityGroupIds")
        ),
        endpoint_private=bool(vpc.take("endpointPrivateAccess")),
        endpoint_public=bool(vpc.take("endpointPublicAccess")),
        public_cidrs=tuple(str(c) for c in vpc.take("publicAccessCidrs", [])),
        logging=tuple(enabled),
        log_group=log_group,
        key=key,
        # From fmctl's own rendering (templates/aws/eks-cluster.yaml.j2), which writes EKS's
        # names; EKS refuses any other at CreateCluster.
        authentication_mode=cast("AuthenticationMode", access.take("authenticationMode")),
        support_type=cast("SupportType", upgrade.take("supportType")),
        tags=p.tags("eks"),
    )
    if access.take("bootstrapClusterCreatorAdminPermissions") is not True:
        raise BlueprintError(f"{path}: fmctl's admin access entry expects the creator's")
    for part in (vpc, access, upgrade, doc):
        part.done()
    p.add(
        "eks",
        EksCluster,
        params,
        version="kubernetes.version",
        public_cidrs="network.apiCidrs",
        endpoint_public="network.apiCidrs",
        subnets="network.availabilityZone",
        key="kubernetes.secretsKeyArn",
    )


def _nodegroup(p: Parts, files: dict[str, str], refs: Refs, group: str, index: int | None) -> None:
    path = f"aws/nodegroups/{group}.yaml"
    doc = load(files, path)
    if doc.take("clusterName") != p.c.name:
        raise BlueprintError(f"{path}: clusterName is not {p.c.name}")
    scaling = doc.sub("scalingConfig")
    update = doc.sub("updateConfig")
    repair = doc.take("nodeRepairConfig", None) or {}
    template = doc.take("launchTemplate", None)
    taints = tuple(
        Taint(str(t["key"]), str(t.get("value", "")), str(t["effect"]))
        for t in doc.take("taints", []) or []
    )
    tags_match(p, doc, path)
    pool = p.c.pools[index] if index is not None else None
    routes, endpoint = way_out(p)
    rid = f"nodegroup/{group}"
    params = NodegroupParams(
        cluster=p.ref("eks", EksOut),
        nodegroup_name=str(doc.take("nodegroupName")),
        ami_type=str(doc.take("amiType")),
        capacity_type=str(doc.take("capacityType")),
        scaling=Scaling(
            int(scaling.take("minSize")),
            int(scaling.take("maxSize")),
            int(scaling.take("desiredSize")),
        ),
        subnets=tuple(refs(s, f"{path}.subnets") for s in doc.take("subnets")),
        node_role=refs(doc.take("nodeRole"), f"{path}.nodeRole"),
        labels=tuple(sorted((str(k), str(v)) for k, v in (doc.take("labels", {}) or {}).items())),
        taints=taints,
        max_unavailable=int(update.take("maxUnavailable")),
        version=str(doc.take("version")),
        tags=p.tags(rid),
        access=p.ref("access/nodes", AccessOut),
        instance_types=tuple(str(t) for t in doc.take("instanceTypes", [])),
        launch_template=refs(template["id"], f"{path}.launchTemplate") if template else None,
        instance_type=pool.instance_type if pool is not None else None,
        reservation_id=pool.reservation_id if pool is not None else None,
        routes=routes,
        endpoint=endpoint,
        repair=NodeRepair.of(repair),
        asg_tags=_asg_tags(files, group),
    )
    for part in (scaling, update, doc):
        part.done()
    at = f"compute.gpuPools[{index}]" if index is not None else "compute.systemNodes"
    p.add(
        rid,
        Nodegroup,
        params,
        scaling=f"{at}.count",
        instance_type=f"{at}.instanceType",
        capacity_type=f"{at}.capacity.type",
        ami_type=f"{at}.instanceType",
        labels=f"{at}.labels",
        version="kubernetes.version",
        subnets="network.availabilityZone",
        repair="health.maxInRepair",
        **{"repair.overrides": "health.repair"},
    )


def _asg_tags(files: dict[str, str], group: str) -> tuple[tuple[str, str], ...]:
    """The tags fmctl puts on the node group's Auto Scaling group (aws/autoscaling/): those
    of a pool the Cluster Autoscaler sizes; none for the others."""
    path = f"aws/autoscaling/{group}.yaml"
    if path not in files:
        return ()
    doc = load(files, path)
    if doc.take("nodegroupName") != group:
        raise BlueprintError(f"{path}: nodegroupName is not {group}")
    tags = tuple(sorted((str(k), str(v)) for k, v in (doc.take("tags") or {}).items()))
    doc.done()
    return tags


#: The VPC CNI add-on's configuration values: its network policy agent on.
VPC_CNI_CONFIGURATION = '{"enableNetworkPolicy": "true"}'


def _addons(p: Parts) -> None:
    pins = {str(k): v for k, v in p.spec.kubernetes.addon_versions.items()}
    eks = p.ref("eks", EksOut)
    system = After("nodegroup/system", NodegroupOut)
    for addon in ADDONS:
        if addon == "aws-fsx-csi-driver" and p.c.fsx is None:
            continue
        rid = f"addon/{addon}"
        extra: dict[str, Any] = {}
        if addon == "aws-fsx-csi-driver":
            p.role("iam/fsx-csi", "fsx-csi", pods=("kube-system", FSX_CSI_ACCOUNT))
            extra = {
                "role": p.ref("iam/fsx-csi", RoleOut),
                "service_account": FSX_CSI_ACCOUNT,
                "agent": p.ref("addon/eks-pod-identity-agent", AddonOut),
            }
        if addon == "vpc-cni":
            # The VPC CNI enforces NetworkPolicies only with its network policy agent on
            # (add-on configuration enableNetworkPolicy; EKS User Guide, "Restrict Pod
            # network traffic with Kubernetes network policies"): the rendered ones bind.
            extra = {"configuration": VPC_CNI_CONFIGURATION}
        params = AddonParams(
            eks, addon, p.c.kubernetes_version, system, p.tags(rid), pins.get(addon), **extra
        )
        p.add(rid, Addon, params, version=f"kubernetes.addonVersions.{addon}")
    if p.c.amp_workspace_arn:
        # Prometheus's service account assumes a role that may write to the workspace: made
        # before the stack, so Prometheus starts with credentials.
        p.role(
            "iam/prometheus-amp",
            "prometheus-amp",
            amp_write_policy(p.c.amp_workspace_arn),
            pods=("monitoring", "prometheus"),
        )
        identity = IdentityParams(
            eks,
            "monitoring",
            "prometheus",
            p.ref("iam/prometheus-amp", RoleOut),
            p.ref("addon/eks-pod-identity-agent", AddonOut),
            p.tags("pod-identity/prometheus"),
        )
        p.add("pod-identity/prometheus", PodIdentity, identity)


def _applied(c: ClusterContext, path: str) -> bool:
    """What `up` applies of the rendered files: kubernetes/, except, with Kueue, the NCCL
    test (queued, Kueue would start it at once; `kubectl apply -k` or `fmctl check` runs it
    when wanted)."""
    if not path.startswith("kubernetes/"):
        return False
    return c.queueing is None or not path.startswith("kubernetes/nccl-test/")


def _stack(p: Parts, files: dict[str, str], where: Where) -> None:
    c = p.c
    pools = tuple(
        PoolCheck(
            x.name,
            x.count,
            x.gpus,
            x.efa_devices if x.efa else 0,
            x.itype.ultra_server,
            x.autoscaled,
        )
        for x in c.pools
    )
    ids = [i.id for i in p.items]
    params = StackParams(
        cluster=p.ref("eks", EksOut),
        files=tuple(sorted((k, v) for k, v in files.items() if _applied(c, k))),
        pools=pools,
        kubeconfig=str(where.kubeconfig),
        private_subnet=p.ref("subnet/private", SubnetOut),
        admin=p.ref("access/admin", AccessOut),
        nodegroups=tuple(Ref(i, NodegroupOut) for i in ids if i.startswith("nodegroup/")),
        addons=tuple(Ref(i, AddonOut) for i in ids if i.startswith("addon/")),
        identities=tuple(Ref(i, IdentityOut) for i in ids if i.startswith("pod-identity/")),
        charts=tuple(Ref(i, ChartOut) for i in ids if i.startswith("chart/")),
        fsx=p.maybe("fsx", FsxOut),
        fsx_group=p.maybe("sg/fsx", SgOut),
        token_args=where.token_args,
        apply=p.spec.kubernetes.in_cluster_stack == "fmctl",
    )
    p.add("kube-stack", KubeStack, params, nodes="compute.gpuPools")
