"""`fmctl status`: what a cluster owns (from tags alone), and the scheduler's side — the
ParallelCluster cluster and its head node, or the EKS cluster with its add-ons, nodes per pool
(GPU and EFA allocatable) and the in-cluster stack — with how to reach it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from provisioner.ops.pcs_status import PcsStatus
from provisioner.ops.queue_status import DomainRow, QueueRow, domains, queues
from provisioner.ops.target import Target, kubeconfig_path, make_context, pcluster_command
from provisioner.resources.base import Owned
from provisioner.spec.model import ClusterSpec

if TYPE_CHECKING:
    from provisioner.ops.cost_report import BudgetNow


@dataclass(frozen=True)
class NodeRow:
    """One Kubernetes node of a pool."""

    name: str
    ready: bool
    gpus: str
    efa: str
    #: Why its GPUs cannot be used as they are (None: they can): fewer GPUs or EFA devices
    #: allocatable than its type has, or not Ready.
    problem: str | None = None

    def as_data(self) -> dict[str, Any]:
        """JSON-able form (counts as numbers)."""
        return {
            "name": self.name,
            "ready": self.ready,
            "gpus": _count(self.gpus),
            "efa": _count(self.efa),
            "problem": self.problem,
        }


def _count(quantity: str) -> int | str:
    """An allocatable count as a number (Kubernetes gives quantities as strings)."""
    return int(quantity) if quantity.isdigit() else quantity


@dataclass(frozen=True)
class StackRow:
    """A DaemonSet or Deployment fmctl applied, and how many of its pods are ready."""

    kind: str
    namespace: str
    name: str
    ready: int
    desired: int

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}: {self.ready}/{self.desired} ready"

    def as_data(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "ready": self.ready,
            "desired": self.desired,
        }


@dataclass(frozen=True)
class AutoscaledRow:
    """A pool the Cluster Autoscaler sizes (cost.idle scale-down): its node group's bounds and
    the size it wants now."""

    pool: str
    min: int
    max: int
    desired: int

    def __str__(self) -> str:
        return (
            f"the Cluster Autoscaler sizes it, {self.min} to {self.max}: "
            f"{self.desired} wanted now; idle nodes go after cost.idle.after"
        )

    def as_data(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"pool": self.pool, "min": self.min, "max": self.max, "desired": self.desired}


@dataclass(frozen=True)
class KubeStatus:
    """The EKS side."""

    status: str
    version: str
    addons: tuple[tuple[str, str, str], ...] = ()
    pools: tuple[tuple[str, tuple[NodeRow, ...]], ...] = ()
    stack: tuple[StackRow, ...] = ()
    #: Kueue's ClusterQueues and their workloads; NVIDIA's ComputeDomains.
    queues: tuple[QueueRow, ...] = ()
    domains: tuple[DomainRow, ...] = ()
    #: Pools the Cluster Autoscaler sizes (cost.idle scale-down).
    autoscaled: tuple[AutoscaledRow, ...] = ()

    def as_data(self) -> dict[str, Any]:
        """JSON-able form: what the text shows, and whether all of it is healthy (every
        GPU node usable as its type is, ``unhealthy`` saying which is not and why)."""
        nodes = [n for _, rows in self.pools for n in rows]
        return {
            "status": self.status,
            "version": self.version,
            "addons": [{"name": a, "version": v, "status": st} for a, v, st in self.addons],
            "pools": [
                {"pool": pool, "nodes": [n.as_data() for n in rows]} for pool, rows in self.pools
            ],
            "stack": [row.as_data() for row in self.stack],
            "queues": [q.as_data() for q in self.queues],
            "computeDomains": [d.as_data() for d in self.domains],
            "autoscaled": [row.as_data() for row in self.autoscaled],
            "healthy": self.status == "ACTIVE"
            and all(n.ready and n.problem is None for n in nodes)
            and all(r.ready >= r.desired for r in self.stack)
            and all(st == "ACTIVE" for _, _, st in self.addons),
            "unhealthy": [
                {"node": n.name, "pool": pool, "why": n.problem}
                for pool, rows in self.pools
                for n in rows
                if n.problem is not None
            ],
        }


@dataclass(frozen=True)
class SlurmStatus:
    """The ParallelCluster side."""

    status: str
    head_node: str
    head_ip: str
    #: The head node's optional exporters and monitoring, as its bootstrap recorded them:
    #: (name, "ok" or "missing: why"); empty when it published nothing (yet).
    exporters: tuple[tuple[str, str], ...] = ()

    def as_data(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "provider": "parallelcluster",
            "status": self.status,
            "headNode": {"instanceId": self.head_node, "ip": self.head_ip},
            "exporters": [{"name": n, "state": st} for n, st in self.exporters],
        }


@dataclass(frozen=True)
class BlockRow:
    """One pool's Capacity Block and how long it has left."""

    pool: str
    reservation_id: str
    state: str
    ends: str | None  # ISO 8601, UTC
    seconds_left: float | None

    def line(self) -> str:
        """What `status` prints."""
        head = f"capacity block {self.reservation_id} (pool {self.pool}, {self.state})"
        if self.ends is None or self.seconds_left is None:
            return f"{head}: its end is not known"
        if self.seconds_left <= 0:
            return f"{head}: ended at {self.ends}"
        hours, minutes = divmod(int(self.seconds_left // 60), 60)
        days, hours = divmod(hours, 24)
        left = f"{days}d {hours}h {minutes}m" if days else f"{hours}h {minutes}m"
        return f"{head}: ends {self.ends}, {left} left"

    def as_data(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "pool": self.pool,
            "reservationId": self.reservation_id,
            "state": self.state,
            "ends": self.ends,
            "secondsLeft": None if self.seconds_left is None else int(self.seconds_left),
        }


@dataclass(frozen=True)
class Status:
    """Everything `status` shows."""

    cluster: str
    region: str
    resources: tuple[Owned, ...]
    slurm: SlurmStatus | None = None
    kube: KubeStatus | None = None
    access: tuple[str, ...] = field(default=())
    pcs: PcsStatus | None = None
    #: The Capacity Blocks of the spec `up` last applied here (none without it).
    blocks: tuple[BlockRow, ...] = ()
    #: The cluster's budget (cost.budget), as AWS Budgets counts it.
    budget: BudgetNow | None = None

    def as_data(self) -> dict[str, Any]:
        """JSON-able form: everything the text shows."""
        return {
            "cluster": self.cluster,
            "region": self.region,
            "exists": bool(self.resources),
            "resources": [
                {"kind": o.kind, "resource": o.resource, "id": o.id} for o in self.resources
            ],
            "slurm": self.slurm.as_data() if self.slurm else None,
            "kubernetes": self.kube.as_data() if self.kube else None,
            "pcs": self.pcs.as_data() if self.pcs else None,
            "access": list(self.access),
            "capacityBlocks": [b.as_data() for b in self.blocks],
            "budget": self.budget.as_data() if self.budget else None,
        }


def status(target: Target, name: str) -> Status:
    """The cluster's status on ``target`` (read-only)."""
    from provisioner.ops.planner import find_owned

    ctx = make_context(target, name, read_only=True)
    found = tuple(find_owned(ctx))
    slurm = kube = None
    access: list[str] = []
    if any(o.kind == "parallelcluster" for o in found):
        slurm, access = slurm_status(target, name)
    if any(o.kind == "eks-cluster" for o in found):
        kube = kube_status(target, name, ctx)
        if kube is not None and kube.status == "ACTIVE":
            access = kube_access(name, target.region, str(kubeconfig_path(target, name)))
    pcs = None
    if any(o.kind == "pcs-cluster" for o in found):
        pcs, access = pcs_view(target, name)
    blocks = capacity_blocks(target, name) if found else ()
    budget = None
    if any(o.kind == "budget" for o in found):
        from provisioner.ops.cost_report import budget_now

        budget = budget_now(ctx.aws, name)
    return Status(name, target.region, found, slurm, kube, tuple(access), pcs, blocks, budget)


def capacity_blocks(target: Target, name: str) -> tuple[BlockRow, ...]:
    """Each Capacity Block the spec `up` last applied here names, and its time left
    (DescribeCapacityReservations' EndDate); none when no spec is saved here."""
    import time

    from provisioner.ops.check import CheckUnavailable, saved_spec

    try:
        spec = saved_spec(target.home, name)
    except CheckUnavailable:
        return ()
    pools = {
        p.capacity.reservation_id: p.name
        for p in spec.compute.gpu_pools
        if p.capacity.type == "capacity-block" and p.capacity.reservation_id
    }
    if not pools:
        return ()
    from provisioner.drivers.aws import error_code

    ec2 = target.aws(read_only=True).client("ec2")
    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=sorted(pools))
    except Exception as exc:  # a block gone or not readable: status shows the rest
        if error_code(exc) is None:
            raise
        return tuple(BlockRow(pool, rid, "unreadable", None, None) for rid, pool in pools.items())
    rows = []
    for res in found["CapacityReservations"]:
        end = res.get("EndDate")
        rows.append(
            BlockRow(
                pools[res["CapacityReservationId"]],
                str(res["CapacityReservationId"]),
                str(res.get("State", "")),
                end.strftime("%Y-%m-%dT%H:%MZ") if end is not None else None,
                end.timestamp() - time.time() if end is not None else None,
            )
        )
    return tuple(sorted(rows, key=lambda r: r.pool))


def pcs_view(target: Target, name: str) -> tuple[PcsStatus | None, list[str]]:
    """The PCS side and how to reach its login node (Grafana runs there)."""
    from provisioner.ops.pcs_status import pcs_status
    from provisioner.ops.team import applied_spec

    seen = pcs_status(make_context(target, name, read_only=True))
    if seen is None or seen.login is None:
        return seen, []
    spec = applied_spec(target, name)
    grafana = bool(spec and spec.observability.prometheus and spec.observability.grafana)
    login = seen.login
    return seen, slurm_access(
        name, target.region, login.id, login.ip, spec, grafana, node="PCS login node"
    )


def slurm_status(target: Target, name: str) -> tuple[SlurmStatus | None, list[str]]:
    """The head node's state, login and Grafana, with the spec `up` saved (if there is one)."""
    from provisioner.drivers.pcluster import ParallelCluster
    from provisioner.ops.team import applied_spec

    command = pcluster_command(target)
    found = (
        ParallelCluster(command, target.region, env=target.aws().child_env()).describe(name)
        if command
        else None
    )
    if not found:
        return None, []
    head = found.get("headNode", {})
    slurm = SlurmStatus(
        str(found["clusterStatus"]),
        head.get("instanceId", ""),
        head.get("publicIpAddress") or head.get("privateIpAddress", ""),
        head_exporters(target, name),
    )
    spec = applied_spec(target, name)
    grafana = bool(spec and spec.observability.prometheus and spec.observability.grafana)
    return slurm, slurm_access(name, target.region, slurm.head_node, slurm.head_ip, spec, grafana)


def head_exporters(target: Target, name: str) -> tuple[tuple[str, str], ...]:
    """What the head node's on-node-configured.sh published of its exporters (read-only)."""
    from provisioner.check.outputs import parse_exporters
    from provisioner.drivers.aws import AwsError, error_code
    from provisioner.resources.storage import artifact_bucket

    ctx = make_context(target, name, read_only=True)
    key = f"{name}-check/exporters/head.txt"
    try:
        body = ctx.aws.client("s3").get_object(Bucket=artifact_bucket(ctx), Key=key)
        text = body["Body"].read().decode(errors="replace")
    except AwsError:
        return ()  # no artifact bucket: nothing was bootstrapped
    except Exception as exc:  # the SDK's error family, unknown to this layer
        if error_code(exc) is None:
            raise
        return ()  # not published (yet), or not readable: status shows the rest
    return tuple((e.name, "ok" if e.ok else f"missing: {e.reason}") for e in parse_exporters(text))


def slurm_access(
    name: str,
    region: str,
    head: str,
    head_ip: str,
    spec: ClusterSpec | None,
    grafana: bool,
    node: str = "head node",
) -> list[str]:
    """How to log in to the head node and reach Grafana on it (`up` and `status`): SSH as
    the image's user where a key pair and sshCidr let one in, else SSM."""
    from provisioner.render.context import os_login_user

    key = spec.compute.head_node.key_name if spec else None
    if key and spec is not None and spec.network.ssh_cidr:
        user = os_login_user(spec.slurm.os)
        how = f"ssh -i ~/.ssh/{key}.pem {user}@{head_ip}"
    else:
        how = f"aws ssm start-session --target {head} --region {region}"
    lines = [f"log in: {how}   (Slurm {node} of {name})"]
    if grafana:
        lines.append(
            f"grafana: aws ssm start-session --target {head} --region {region} --document-name "
            'AWS-StartPortForwardingSession --parameters \'{"portNumber":["3000"],'
            '"localPortNumber":["3000"]}\'  then http://localhost:3000 (user admin; the '
            f"password is in /etc/fmctl/grafana-admin on the {node}, never on this machine)"
        )
    return lines


def kube_status(target: Target, name: str, ctx: Any = None) -> KubeStatus | None:
    """Nodes per pool (GPU/EFA allocatable, and whether that is all their type has), add-ons
    and the stack's health. ``ctx``: a read-only context of the cluster whose reads (the
    node groups `status` found) are reused, else a new one."""
    from provisioner.resources.eks import EksCluster
    from provisioner.resources.kube_api import connect
    from provisioner.resources.kube_health import EFA, GPU, POOL_LABEL

    ctx = ctx or make_context(target, name, read_only=True)
    cluster = EksCluster().describe(ctx)
    if cluster is None:
        return None
    eks = ctx.aws.client("eks")
    autoscaled = _autoscaled(ctx)
    addons = []
    for addon in eks.list_addons(clusterName=name)["addons"]:
        item = eks.describe_addon(clusterName=name, addonName=addon)["addon"]
        addons.append((addon, str(item["addonVersion"]), str(item["status"])))
    status, version = str(cluster["status"]), str(cluster.get("version"))
    if status != "ACTIVE":
        return KubeStatus(status, version, tuple(addons))
    expected = expected_devices(target, name)
    api = connect(ctx, cluster["endpoint"], cluster["certificateAuthority"]["data"])
    try:
        pools: dict[str, list[NodeRow]] = {}
        for node in api.list("v1", "Node"):
            labels = node["metadata"].get("labels", {})
            pool = labels.get(POOL_LABEL) or labels.get("eks.amazonaws.com/nodegroup", "?")
            alloc = node.get("status", {}).get("allocatable", {})
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in node.get("status", {}).get("conditions", [])
            )
            gpus, efa = alloc.get(GPU, "0"), alloc.get(EFA, "0")
            want = expected(pool, labels.get(INSTANCE_TYPE_LABEL, ""))
            problem = _short_of(ready, gpus, efa, want)
            row = NodeRow(node["metadata"]["name"], ready, gpus, efa, problem)
            pools.setdefault(pool, []).append(row)
        stack = _stack_health(api)
        queue_rows, domain_rows = queues(api), domains(api)
    finally:
        api.close() if hasattr(api, "close") else None
    for sized in autoscaled:
        pools.setdefault(sized.pool, [])  # an autoscaled pool at zero nodes is still listed
    rows = tuple((pool, tuple(nodes)) for pool, nodes in sorted(pools.items()))
    return KubeStatus(
        status, version, tuple(addons), rows, tuple(stack), queue_rows, domain_rows, autoscaled
    )


def _autoscaled(ctx: Any) -> tuple[AutoscaledRow, ...]:
    """The node groups the Cluster Autoscaler sizes: those whose nodes carry its GPU label
    (fmctl sets it on autoscaled pools only)."""
    from provisioner.catalog.autoscaler import GPU_LABEL
    from provisioner.resources.eks_nodes import Nodegroup
    from provisioner.resources.kube_health import POOL_LABEL

    out = []
    for ng in Nodegroup().described(ctx):
        labels = ng.get("labels") or {}
        if GPU_LABEL not in labels:
            continue
        scaling = ng.get("scalingConfig") or {}
        out.append(
            AutoscaledRow(
                str(labels.get(POOL_LABEL, ng["nodegroupName"])),
                int(scaling.get("minSize", 0)),
                int(scaling.get("maxSize", 0)),
                int(scaling.get("desiredSize", 0)),
            )
        )
    return tuple(sorted(out, key=lambda row: row.pool))


#: The well-known label the kubelet sets to the node's EC2 instance type (Kubernetes'
#: "Well-Known Labels, Annotations and Taints": node.kubernetes.io/instance-type).
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


def expected_devices(target: Target, name: str) -> Any:
    """``(pool, instance type) -> (GPUs, EFA devices)`` a node must advertise: the applied
    spec's pools (EFA as the spec set it), else the catalog's facts of the type (EFA on,
    as fmctl's pools have it by default); (0, 0) for a node of no GPU type."""
    from provisioner.catalog import load_catalog
    from provisioner.ops.team import applied_spec
    from provisioner.render.context import build_context
    from provisioner.render.efa import efa_device_count, efa_interfaces

    catalog = load_catalog()
    by_pool: dict[str, tuple[int, int]] = {}
    try:
        spec = applied_spec(target, name)
    except Exception:  # noqa: BLE001 - no state to read: the catalog alone says what each type has
        spec = None
    if spec is not None and spec.scheduler == "kubernetes":
        for pool in build_context(spec, catalog).pools:
            by_pool[pool.name] = (pool.gpus, pool.efa_devices if pool.efa else 0)

    def expected(pool: str, instance_type: str) -> tuple[int, int]:
        if pool in by_pool:
            return by_pool[pool]
        itype = catalog.get(instance_type)
        if itype is None or not itype.is_gpu:
            return (0, 0)
        gpus = itype.gpu.count if itype.gpu else 0
        return (gpus, efa_device_count(efa_interfaces(itype, True)))

    return expected


def _short_of(ready: bool, gpus: str, efa: str, want: tuple[int, int]) -> str | None:
    """Why a node's GPUs cannot be used as its type allows, or None."""
    from provisioner.resources.kube_health import EFA, GPU

    wanted_gpus, wanted_efa = want
    if wanted_gpus == 0:
        return None if ready else "not Ready"
    short = [
        f"advertises {have or 0} {resource}, expected {count}"
        for resource, have, count in ((GPU, gpus, wanted_gpus), (EFA, efa, wanted_efa))
        if count and _number(have) < count
    ]
    if not ready:
        short.insert(0, "not Ready")
    return "; ".join(short) or None


def _number(quantity: str) -> int:
    return int(quantity) if str(quantity).isdigit() else 0


def _stack_health(api: Any) -> list[StackRow]:
    """DaemonSets and Deployments fmctl applied, ready or not."""
    from provisioner.resources.tags import OWNER_TAG

    rows = []
    for api_version, kind in (("apps/v1", "DaemonSet"), ("apps/v1", "Deployment")):
        for obj in api.list(api_version, kind, selector="app.kubernetes.io/managed-by=fmctl"):
            if OWNER_TAG not in obj["metadata"].get("labels", {}):
                continue
            status = obj.get("status", {})
            want = status.get("desiredNumberScheduled", obj.get("spec", {}).get("replicas", 1))
            ready = status.get("numberReady", status.get("readyReplicas", 0))
            meta = obj["metadata"]
            rows.append(StackRow(kind, meta["namespace"], meta["name"], int(ready), int(want)))
    return rows


def kube_access(name: str, region: str, kubeconfig: str | None) -> list[str]:
    """How to reach the cluster and its Grafana."""
    from provisioner.drivers.eks_auth import context_name

    where = f"KUBECONFIG={kubeconfig} " if kubeconfig else ""
    context = context_name(name, region)
    return [
        f"kubectl: {where}kubectl --context {context} get nodes",
        f"grafana: {where}kubectl --context {context} -n monitoring port-forward "
        "svc/grafana 3000:3000  then http://localhost:3000 (user admin; the password, made "
        f"in the pod and stored nowhere: {where}kubectl --context {context} -n monitoring exec "
        "deploy/grafana -c grafana -- cat /run/grafana-admin/password)",
    ]
