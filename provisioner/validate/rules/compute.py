"""Rules for compute: instance types from the catalog, EFA, capacity, placement, counts."""

from __future__ import annotations

import re
from collections.abc import Iterator

from provisioner.spec import defaults
from provisioner.spec.model import ClusterSpec, GpuPool
from provisioner.spec.problems import Problem, SpecPath, suggest
from provisioner.spec.resolve import pool_placement_group
from provisioner.validate.rules.registry import RuleContext, rule

POOL_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,24}$")
#: ODCR and Capacity Block ids: cr- and 17 hex digits (8 for old reservations).
RESERVATION_RE = re.compile(r"^cr-[0-9a-f]{8}(?:[0-9a-f]{9})?$")
INSTANCE_TYPE_RE = re.compile(r"^[a-z][a-z0-9-]*\.[0-9a-z-]+$")
SIZE_RE = re.compile(r"^(?:nano|micro|small|medium|large|\d*xlarge|metal(?:-\d+xl)?)$")
#: ParallelCluster's head-node root volume must hold its AMI.
MIN_ROOT_GIB = 40
#: Instances per pool beyond which a count is taken for a typo (`fmctl init` has the same).
MAX_POOL_COUNT = defaults.MAX_POOL_COUNT
#: The CPU nodes' roles, by spec key.
ROLES = {"headNode": "Slurm head node", "systemNodes": "system node group"}
RESERVED = ("reservation", "capacity-block")


def _pools(spec: ClusterSpec) -> Iterator[tuple[SpecPath, GpuPool]]:
    for i, pool in enumerate(spec.compute.gpu_pools):
        yield ("compute", "gpuPools", i), pool


@rule("pool-names")
def pool_names(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Pool names become Slurm partitions and node-group names: short, unique, plain."""
    if not spec.compute.gpu_pools:
        yield Problem(
            "pool-names",
            "no GPU pools",
            ("compute", "gpuPools"),
            hint="add at least one pool with name, instanceType and count",
        )
    seen: dict[str, int] = {}
    for path, pool in _pools(spec):
        if not POOL_NAME_RE.match(pool.name):
            yield Problem(
                "pool-names",
                f"pool name {pool.name!r} is not allowed",
                (*path, "name"),
                hint="1-25 characters: lowercase letters, digits, '-', starting with a letter",
            )
        if pool.name in seen:
            yield Problem(
                "pool-names",
                f"pool name {pool.name!r} is used twice",
                (*path, "name"),
                hint=f"pools {seen[pool.name]} and {path[-1]} need different names",
            )
        seen.setdefault(pool.name, int(path[-1]))


@rule("instance-type")
def gpu_instance_types(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """GPU pools use catalog types (fmctl needs their EFA layout and GPU facts)."""
    gpu_names = [t.name for t in ctx.catalog.types.values() if t.is_gpu]
    for path, pool in _pools(spec):
        itype = ctx.catalog.get(pool.instance_type)
        if itype is None:
            yield Problem(
                "instance-type",
                f"unknown GPU instance type {pool.instance_type!r}",
                (*path, "instanceType"),
                hint=suggest(pool.instance_type, gpu_names)
                or "see `fmctl catalog` for the supported types",
            )
        elif not itype.is_gpu:
            yield Problem(
                "instance-type",
                f"{pool.instance_type} has no GPUs",
                (*path, "instanceType"),
                hint="GPU pools take a GPU type, e.g. "
                "p5.48xlarge; CPU nodes go in headNode or systemNodes",
            )


@rule("node-instance-type")
def node_instance_types(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Head and system nodes may use any EC2 type, but it must look like one.

    fmctl's catalog lists only a few CPU types, so an uncatalogued family is fine; a size
    that EC2 does not have (``4xlarg``) is a typo.
    """
    pairs = [
        (("compute", "headNode", "instanceType"), spec.compute.head_node.instance_type),
        (("compute", "systemNodes", "instanceType"), spec.compute.system_nodes.instance_type),
    ]
    for path, name in pairs:
        if not INSTANCE_TYPE_RE.match(name):
            yield Problem(
                "node-instance-type",
                f"{name!r} is not an EC2 instance type",
                path,
                hint="instance types look like m7i.4xlarge",
            )
        elif not SIZE_RE.match(name.split(".", 1)[1]):
            yield Problem(
                "node-instance-type",
                f"{name!r} has no valid EC2 size",
                path,
                hint=suggest(name, ctx.catalog.names())
                or "sizes look like large, xlarge, 4xlarge or metal",
            )
        elif (known := ctx.catalog.get(name)) is not None and known.is_gpu:
            yield Problem(
                "node-instance-type",
                f"{name} is a GPU instance type: the {ROLES[path[1]]} does no GPU work and "
                "bills as one",
                path,
                level="warning",
                hint="a CPU type such as m7i.4xlarge does the job",
            )


@rule("pool-count")
def counts(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Counts are positive and minCount lies between 0 and count."""
    for path, pool in _pools(spec):
        if pool.count > MAX_POOL_COUNT:
            yield Problem(
                "pool-count",
                f"count {pool.count} is more than fmctl's limit of {MAX_POOL_COUNT} per pool",
                (*path, "count"),
                hint="a typo? split a larger fleet into pools (`fmctl init --count` has the "
                "same limit)",
            )
        if pool.count < 1:
            yield Problem(
                "pool-count",
                f"count must be at least 1, not {pool.count}",
                (*path, "count"),
                hint="remove the pool instead of sizing it to 0",
            )
        if pool.min_count is not None and not 0 <= pool.min_count <= pool.count:
            yield Problem(
                "pool-count",
                f"minCount {pool.min_count} is not between 0 and count ({pool.count})",
                (*path, "minCount"),
                hint="minCount is how many stay running; count is the maximum",
                related=((*path, "count"),),
            )
    system = spec.compute.system_nodes
    if ctx.scheduler == "kubernetes" and not 1 <= system.count <= 50:
        yield Problem(
            "pool-count",
            f"systemNodes.count must be 1 to 50, not {system.count}",
            ("compute", "systemNodes", "count"),
            hint="2 is enough for controllers, Prometheus and Grafana",
        )
    if spec.compute.head_node.root_volume_gib < MIN_ROOT_GIB:
        yield Problem(
            "pool-count",
            f"head node root volume must be at least {MIN_ROOT_GIB} GiB",
            ("compute", "headNode", "rootVolumeGiB"),
            hint="ParallelCluster's images need about 35 GiB; 100 is the default",
        )


@rule("efa-unsupported")
def efa(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """EFA only where the instance type has it."""
    for path, pool in _pools(spec):
        itype = ctx.catalog.get(pool.instance_type)
        if pool.efa and itype is not None and not itype.efa_supported:
            capable = [
                t.name
                for t in ctx.catalog.types.values()
                if t.efa_supported and t.family == itype.family
            ]
            yield Problem(
                "efa-unsupported",
                f"{pool.instance_type} does not support EFA",
                (*path, "efa"),
                hint="set efa: false" + (f", or use {capable[-1]}" if capable else ""),
                related=((*path, "instanceType"),),
            )


@rule("reservation-id")
def reservation_ids(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Reserved capacity needs a well-formed cr- id; other capacity types take none."""
    for path, pool in _pools(spec):
        cap = pool.capacity
        where = (*path, "capacity", "reservationId")
        if cap.type in RESERVED:
            if cap.reservation_id is None:
                yield Problem(
                    "reservation-id",
                    f"capacity type {cap.type} needs reservationId",
                    (*path, "capacity"),
                    hint="add reservationId: cr-... (from the "
                    "EC2 console or `aws ec2 describe-capacity-reservations`)",
                    related=((*path, "capacity", "reservationId"),),
                )
            elif not RESERVATION_RE.match(cap.reservation_id):
                yield Problem(
                    "reservation-id",
                    f"{cap.reservation_id!r} is not a capacity reservation id",
                    where,
                    hint="reservation ids look like cr-0123456789abcdef0",
                )
        elif cap.reservation_id is not None:
            yield Problem(
                "reservation-id",
                f"reservationId is only used with reservation or capacity-block, not {cap.type}",
                where,
                hint="set capacity.type to reservation or capacity-block, or remove reservationId",
                related=((*path, "capacity", "type"),),
            )


@rule("capacity-block")
def capacity_blocks(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Capacity Blocks: a fixed size, on a type sold as Capacity Blocks."""
    for path, pool in _pools(spec):
        signal_set = "checkpoint_signal" in pool.capacity.model_fields_set
        if signal_set and pool.capacity.type != "capacity-block":
            yield Problem(
                "capacity-block",
                "checkpointSignal is only used by a capacity-block pool",
                (*path, "capacity", "checkpointSignal"),
                hint=f"remove it: {pool.capacity.type} capacity does not end on a clock",
                related=((*path, "capacity", "type"),),
            )
        if pool.capacity.type != "capacity-block":
            continue
        if pool.min_count is not None and pool.min_count != pool.count:
            yield Problem(
                "capacity-block",
                "a capacity-block pool has a fixed size: minCount must equal count",
                (*path, "minCount"),
                hint="remove minCount; the block's instances all run for its duration",
                related=((*path, "count"), (*path, "capacity", "type")),
            )
        itype = ctx.catalog.get(pool.instance_type)
        if itype is not None and not itype.capacity_blocks:
            yield Problem(
                "capacity-block",
                f"{pool.instance_type} is not offered as Capacity Blocks",
                (*path, "capacity", "type"),
                hint="use on-demand or reservation, or a p5/p6 type",
                related=((*path, "instanceType"),),
            )


@rule("placement-group")
def placement_groups(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Cluster placement groups: supported by the type, and risky with reserved capacity."""
    for path, pool in _pools(spec):
        if not pool_placement_group(pool, ctx.catalog):
            continue
        itype = ctx.catalog.get(pool.instance_type)
        where = (*path, "placementGroup")
        depends = ((*path, "instanceType"), (*path, "capacity", "type"))
        if itype is not None and not itype.placement_group:
            yield Problem(
                "placement-group",
                f"{pool.instance_type} does not take a cluster placement group",
                where,
                hint="set placementGroup: false"
                + ("; UltraServer capacity is placed by AWS" if itype.ultra_server else ""),
                related=depends,
            )
        elif pool.capacity.type in RESERVED:
            yield Problem(
                "placement-group",
                f"a cluster placement group with {pool.capacity.type}"
                " capacity risks insufficient-capacity errors",
                where,
                level="warning",
                hint="AWS already places reserved capacity; set placementGroup: false",
                related=depends,
            )


@rule("head-node-ssh")
def head_node_ssh(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """A key pair opens SSH only together with network.sshCidr (port 22 is otherwise open to
    the VPC alone): said, so a user does not wait on a login that cannot connect."""
    key = spec.compute.head_node.key_name
    if ctx.scheduler == "slurm" and key is not None and spec.network.ssh_cidr is None:
        yield Problem(
            "head-node-ssh",
            f"key pair {key!r} is set, but no network.sshCidr: SSH reaches the head node "
            "from inside the VPC only",
            ("compute", "headNode", "keyName"),
            level="warning",
            hint="add network.sshCidr: YOUR.RANGE/NN to log in with the key from there; "
            "`aws ssm start-session` works either way",
        )


#: A label name (and a prefix's DNS labels): Kubernetes' "Labels and Selectors, syntax and
#: character set" (https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/):
#: up to 63 characters, alphanumeric at both ends, '-', '_' and '.' between.
LABEL_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
#: A label prefix: a DNS subdomain, lowercase RFC 1123 labels joined by dots.
LABEL_PREFIX_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
#: EKS's limit on a node group label's whole key and its value (API reference,
#: UpdateLabelsPayload and CreateNodegroup: length 1-63 each: no empty value either).
EKS_LABEL_MAX = 63
#: Prefixes EKS refuses on node group labels ("Label cannot contain reserved prefixes
#: [kubernetes.io/, k8s.io/, eks.amazonaws.com/]", CreateNodegroup's error as eksctl issue
#: 4006 records it); their subdomains (node-role.kubernetes.io) are the kubelet's to set,
#: which NodeRestriction refuses to a node's own labels.
RESERVED_LABEL_DOMAINS = ("kubernetes.io", "k8s.io", "eks.amazonaws.com")
#: Labels fmctl sets on every pool's nodes itself (render/context.py).
FMCTL_LABELS = ("fmctl.dev/pool", "fmctl.dev/efa")


def label_problem(key: str, value: str) -> tuple[str, str] | None:
    """What is wrong with a node label (message, hint), or None."""
    prefix, _, name = key.rpartition("/")
    if key in FMCTL_LABELS:
        return f"label {key!r} is fmctl's own", "fmctl sets it on every pool's nodes; drop it"
    domain = prefix.lower()
    if any(domain == d or domain.endswith("." + d) for d in RESERVED_LABEL_DOMAINS):
        return (
            f"label {key!r} uses a prefix EKS reserves",
            "EKS refuses node group labels under kubernetes.io/, k8s.io/ and "
            "eks.amazonaws.com/ (and the kubelet may not set them); use a prefix of your own",
        )
    if (prefix and not LABEL_PREFIX_RE.match(prefix)) or not LABEL_NAME_RE.match(name):
        return (
            f"label key {key!r} is not a Kubernetes label key",
            "[prefix/]name: the name up to 63 letters, digits, '-', '_' or '.', starting and "
            "ending with a letter or digit; the prefix a lowercase DNS name",
        )
    if len(key) > EKS_LABEL_MAX:
        return f"label key {key!r} is {len(key)} characters", "EKS takes keys of up to 63"
    if not value or not LABEL_NAME_RE.match(value):
        return (
            f"label value {value!r} of {key!r} is not a Kubernetes label value",
            "1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or "
            "digit (EKS takes no empty value)",
        )
    return None


@rule("pool-labels")
def pool_labels(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Pool labels become node group labels and node labels: Kubernetes' syntax, EKS's
    lengths and reserved prefixes, checked offline instead of failing at CreateNodegroup."""
    for path, pool in _pools(spec):
        for key, value in pool.labels.items():
            found = label_problem(str(key), str(value))
            if found is not None:
                message, hint = found
                yield Problem("pool-labels", message, (*path, "labels", key), hint=hint)
