"""Stateful stand-ins for what moto lacks: placement groups, FSx for Lustre with its
lifecycle and data-repository associations, service quotas, SSM Run Command that runs
(``ssm_agent``) and the Price List (``pricing``); capacity reservations and the topology
APIs are ``ec2_capacity``'s.

Each resource kind takes its documented time (FSx about 10 minutes, an association about 7)
multiplied by the sandbox's scale, so the progress view and the parallel plan can be seen and
measured. Answers come in the shapes botocore parses (see ``protocol``).
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from fmctl_sandbox import eks_asg, fsx_update, pricing
from fmctl_sandbox import protocol as p
from fmctl_sandbox.block_events import Warnings
from fmctl_sandbox.budgets import Budgets
from fmctl_sandbox.cost_explorer import CostTags
from fmctl_sandbox.ec2_capacity import (
    describe_instance_topology,
    describe_reservation_topology,
    describe_reservations,
    ec2_backend,
    in_region,
)
from fmctl_sandbox.eks import Eks
from fmctl_sandbox.kube import KubeServer
from fmctl_sandbox.kube_programs import Association
from fmctl_sandbox.pcs import Pcs
from fmctl_sandbox.protocol import Call
from fmctl_sandbox.scheduler_run import Runner
from fmctl_sandbox.ssm_agent import Agent

Answer = tuple[int, dict[str, str], bytes]

#: Documented creation and deletion times, seconds (before scaling).
DURATIONS = {"fsx-create": 600.0, "fsx-delete": 300.0, "dra-create": 420.0, "dra-delete": 180.0}


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(epoch))


def _hex(n: int = 17) -> str:
    return uuid.uuid4().hex[:n]


@dataclass
class Timed:
    """A resource whose lifecycle moves on with the clock."""

    data: dict[str, Any]
    ready_at: float
    deleting_at: float | None = None
    gone_at: float | None = None
    region: str = "us-east-1"


@dataclass
class World:
    """One account's shim state. AWS keeps each account's resources apart and each region's
    too: every table is keyed by region first, so a name or an id in one region is unknown in
    another (DescribeFileSystems in us-east-1 does not list us-east-2's)."""

    account: str
    scale: float
    eks: Eks
    ssm: Agent
    pcs: Pcs
    #: (region, group name) -> the group.
    placement_groups: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    #: (region, reservation id) -> the reservation.
    reservations: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    #: (region, id) -> a file system / an association.
    file_systems: dict[tuple[str, str], Timed] = field(default_factory=dict)
    associations: dict[tuple[str, str], Timed] = field(default_factory=dict)
    #: (region, client token) -> the id it created.
    tokens: dict[tuple[str, str], str] = field(default_factory=dict)
    #: FSx updates on their way: (region, id) -> (when they land, the changes).
    fsx_updates: dict[tuple[str, str], tuple[float, dict[str, Any]]] = field(default_factory=dict)
    #: S3 bucket names are global; a bucket's policy is its owner's.
    bucket_policies: dict[str, str] = field(default_factory=dict)
    #: Quotas changed from their defaults: (region, service, code) -> value.
    quota_values: dict[tuple[str, str, str], float] = field(default_factory=dict)

    def _after(self, key: str) -> float:
        return time.monotonic() + DURATIONS[key] * self.scale

    def quota(self, region: str, service: str, code: str) -> float | None:
        """A quota's value in a region (each region has its own, starting at the default)."""
        value = self.quota_values.get((region, service, code))
        return value if value is not None else QUOTAS.get((service, code))

    def _advance(self, now: float) -> None:
        fsx_update.advance(self, now)
        for table in (self.file_systems, self.associations):
            for key, item in list(table.items()):
                if item.gone_at is not None and now >= item.gone_at:
                    _release_interfaces(self.account, item)
                    del table[key]
                elif item.deleting_at is not None:
                    item.data["Lifecycle"] = "DELETING"
                elif now >= item.ready_at and key not in self.fsx_updates:
                    # An update on its way keeps it UPDATING until the update lands.
                    item.data["Lifecycle"] = "AVAILABLE"


#: Default quotas, every region alike (Service Quotas' defaults for a new account are lower;
#: the sandbox's stand for an account that asked for GPU capacity).
QUOTAS: dict[tuple[str, str], float] = {
    ("ec2", "L-417A185B"): 6144.0,  # Running On-Demand P instances (vCPUs)
    ("ec2", "L-7212CCBC"): 6144.0,  # All P Spot Instance Requests (vCPUs)
    ("fsx", "L-1216C47A"): 1_000_000.0,  # Lustre persistent storage capacity (GiB)
}


@dataclass
class Shims:
    """All shim state of one sandbox server: a ``World`` per account, and the Kubernetes API
    every account's EKS clusters share (each cluster at an endpoint of its own)."""

    scale: float = 0.0
    #: Held over every change to AWS's state: the shims' and moto's (see ``server.Emulator``).
    lock: threading.RLock = field(default_factory=threading.RLock)
    kube: KubeServer = field(default_factory=KubeServer)
    ca_pem: bytes = b""
    worlds: dict[str, World] = field(default_factory=dict)
    #: EventBridge Scheduler's clock and the schedules it ran (``scheduler_run``).
    scheduler: Runner = field(default_factory=Runner)
    #: EC2's Capacity Block warnings sent on the scheduler's clock (``block_events``).
    block_warnings: Warnings = field(default_factory=Warnings)
    #: Cost Explorer's cost allocation tags (``cost_explorer``).
    cost_tags: CostTags = field(default_factory=CostTags)
    #: AWS Budgets, with a spend the sandbox sets (``budgets``).
    budgets: Budgets = field(default_factory=Budgets)

    def __post_init__(self) -> None:
        # The in-cluster programs' intervals run on the sandbox's clock too.
        self.kube.programs.scale = self.scale
        self.kube.programs.identity = self.pod_identity

    def pod_identity(self, endpoint: str, namespace: str, account: str) -> Association | None:
        """The pod identity association of a service account of the cluster at
        ``endpoint``. Called from the cluster's API (under its own lock, not this one: the
        tables are copied whole, each copy one step)."""
        for world in list(self.worlds.values()):
            eks = world.eks
            where = next((k for k, v in list(eks.endpoints.items()) if v == endpoint), None)
            if where is None:
                continue
            for (region, cluster, _), item in list(eks.identities.items()):
                if (region, cluster) == where and (
                    item["namespace"],
                    item["serviceAccount"],
                ) == (namespace, account):
                    return Association(
                        world.account, region, cluster, namespace, account, str(item["roleArn"])
                    )
        return None

    def world(self, account: str) -> World:
        """The state of ``account``, made on first use (call under the lock)."""
        found = self.worlds.get(account)
        if found is None:
            found = self.worlds[account] = World(
                account,
                self.scale,
                Eks(self.scale, self.kube, self.ca_pem, account),
                # Instances run commands with the same tools as the Kubernetes nodes' pods;
                # the EKS nodes are instances too.
                Agent(
                    lambda: self.kube.node_tools,
                    account,
                    lambda region: self.node_instances(account, region),
                    aws_state=self.lock,
                ),
                Pcs(account, self.scale),
            )
            world = found
            found.eks.reservation_source = lambda region, rid: world.reservations.get((region, rid))
        return found

    def node_instances(self, account: str, region: str) -> dict[str, dict[str, str]]:
        """The EKS nodes of ``account`` in ``region``: instances moto does not hold, with
        their tags (``eks_asg.instances``)."""
        with self.lock:
            return eks_asg.instances(self.world(account).eks, region)

    def handles(self, call: Call) -> bool:
        """True when the call is one of the shims'."""
        if call.service in ("eks", "pcs", "pricing"):
            return True
        if self.cost_tags.handles(call) or self.budgets.handles(call):
            return True
        if call.service == "autoscaling":  # a node group's own group; moto has the rest
            with self.lock:
                return eks_asg.handles(self.world(call.account).eks, call)
        if call.service == "s3":
            return call.action.endswith("?policy")
        if call.service == "fsx" and call.action in fsx_update.HANDLERS:
            return True
        if call.service == "ec2" and call.action in ("CreateTags", "DeleteTags"):
            ids = p.indexed(call.params, "ResourceId")
            return bool(ids) and all(i.startswith("pg-") for i in ids)
        return call.action in _HANDLERS and (
            call.service in ("ec2", "fsx", "servicequotas") or call.protocol == "json"
        )

    def handle(self, call: Call, base_url: str = "") -> Answer:
        """Answer a call (under the shim lock); ``base_url`` is the emulator's own address."""
        if self.cost_tags.handles(call):
            with self.lock:
                return self.cost_tags.handle(call)
        if self.budgets.handles(call):
            with self.lock:
                return self.budgets.handle(call)
        if call.service == "pricing":  # no state: a recorded slice of the offer files
            if call.action == "GetProducts":
                return pricing.get_products(call)
            return p.json_error(400, "InvalidAction", f"the sandbox has no {call.action}")
        with self.lock:
            world = self.world(call.account)
            if call.service == "eks":
                return world.eks.handle(call, base_url)
            if call.service == "pcs":
                return world.pcs.handle(call)
            if call.service == "autoscaling":
                return eks_asg.handle(world.eks, call)
            world._advance(time.monotonic())
            if call.service == "s3":
                return _bucket_policy(world, call)
            if call.service == "fsx" and call.action in fsx_update.HANDLERS:
                return fsx_update.HANDLERS[call.action](world, call)
            if call.action in ("CreateTags", "DeleteTags"):
                return _pg_tags(world, call)
            return _HANDLERS[call.action](world, call)

    def tick(self) -> None:
        """Let lifecycles move on with the clock (EKS node groups join their nodes even
        while only the Kubernetes API is being asked)."""
        with self.lock:
            for world in self.worlds.values():
                world.eks.advance(time.monotonic())

    def inject_fault(self, account: str, region: str, data: dict[str, Any]) -> str:
        """A fault on a sandbox EKS node, as its node monitoring agent reports it
        (``eks_repair.inject``), or on a PCS cluster's instance, as PCS's health monitoring
        finds it (``pcs_repair.inject``); what came of it."""
        from fmctl_sandbox import eks_repair, pcs_repair

        with self.lock:
            world = self.world(account)
            cluster, node = str(data["cluster"]), str(data["node"])
            if (region, cluster) not in world.eks.clusters and node.startswith("i-"):
                # A PCS cluster's instance: PCS's health monitoring acts on it.
                return pcs_repair.inject(world.pcs, region, cluster, node, data["fault"])
            return eks_repair.inject(world.eks, region, cluster, node, data["fault"])

    # --- seeding: what a spec needs that no API can make ---------------------------------
    def seed_reservation(self, account: str, region: str, data: dict[str, Any]) -> None:
        """Add a capacity reservation or block (``capacityReservationId`` required) in
        ``region``; the fields left out get the values of an ordinary Linux reservation."""
        usual: dict[str, Any] = {
            "instancePlatform": "Linux/UNIX",
            "tenancy": "default",
            "ownerId": account,
        }
        if data.get("reservationType") == "capacity-block":
            # A Capacity Block always has its window (botocore's ec2 model: StartDate,
            # EndDate, EndDateType limited); one seeded without says it started now and
            # runs 14 days, a common length (blocks run 1 to 182 days).
            now = time.time()
            usual |= {
                "startDate": _iso(now),
                "endDate": _iso(now + 14 * 86400),
                "endDateType": "limited",
            }
        with self.lock:
            world = self.world(account)
            world.reservations[(region, data["capacityReservationId"])] = {**usual, **data}

    def seed_image(self, account: str, data: dict[str, Any]) -> str:
        """Add an Amazon-owned AMI to moto's EC2 in ``region`` (``name`` required).

        ParallelCluster looks its official AMI up by name among Amazon's images
        (aws-parallelcluster-VERSION-OS-ARCH*); moto ships none, and no API can register an
        image as Amazon's, so this reaches into moto's backend.
        """
        from moto.ec2.models import ec2_backends
        from moto.ec2.utils import random_ami_id

        backend = ec2_backends[account][data.get("region", "us-east-1")]
        with self.lock:
            # Once per name: seeding again (every `up`) finds the image it made.
            for image in backend.amis.values():
                if image.name == data["name"] and image.owner_alias == "amazon":
                    return str(image.id)
        image_id = random_ami_id()
        with self.lock:
            backend.amis[image_id] = self._ami(backend, image_id, data)
        return image_id

    @staticmethod
    def _ami(backend: Any, image_id: str, data: dict[str, Any]) -> Any:
        from moto.ec2.models.amis import Ami

        return Ami(
            backend,
            image_id,
            name=data["name"],
            owner_id="247102896272",  # ParallelCluster's publishing account
            owner_alias="amazon",
            architecture=data.get("architecture", "x86_64"),
            virtualization_type="hvm",
            root_device_type="ebs",
            root_device_name="/dev/xvda",
            platform="Linux/UNIX",
        )


def _pg_create(s: World, call: Call) -> Answer:
    name = call.params.get("GroupName", "")
    if (call.region, name) in s.placement_groups:
        return p.ec2_error(
            400, "InvalidPlacementGroup.Duplicate", f"The placement group '{name}' already exists."
        )
    group = {
        "groupName": name,
        "state": "available",
        "strategy": call.params.get("Strategy", "cluster"),
        "groupId": f"pg-{_hex()}",
        "groupArn": f"arn:aws:ec2:{call.region}:{s.account}:placement-group/{name}",
        "tags": p.query_tags(call.params),
    }
    s.placement_groups[(call.region, name)] = group
    return p.ec2_response(
        "CreatePlacementGroup", {"return": True, "placementGroup": _pg_out(group)}
    )


def _pg_out(group: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in group.items() if k != "tags"}
    out["tagSet"] = p.tag_set(group["tags"])
    return out


def _pg_tags(s: World, call: Call) -> Answer:
    """CreateTags / DeleteTags on placement groups (EC2 tags them by their pg- id)."""
    ids = set(p.indexed(call.params, "ResourceId"))
    changes = p.query_tags(
        {
            k.replace("Tag.", "TagSpecification.1.Tag."): v
            for k, v in call.params.items()
            if k.startswith("Tag.")
        }
    )
    for group in in_region(s.placement_groups, call.region).values():
        if group["groupId"] not in ids:
            continue
        if call.action == "CreateTags":
            group["tags"].update(changes)
        else:
            keys = [
                call.params[k] for k in call.params if k.startswith("Tag.") and k.endswith(".Key")
            ]
            for key in keys:
                group["tags"].pop(key, None)
    return p.ec2_response(call.action, {"return": True})


def _pg_describe(s: World, call: Call) -> Answer:
    names = p.indexed(call.params, "GroupName")
    filters = p.query_filters(call.params)
    here = in_region(s.placement_groups, call.region)
    missing = [n for n in names if n not in here]
    if missing:
        return p.ec2_error(
            400, "InvalidPlacementGroup.Unknown", f"The Placement Group '{missing[0]}' is unknown."
        )
    groups = [
        g
        for g in here.values()
        if (not names or g["groupName"] in names) and p.matches(g["tags"], filters)
    ]
    return p.ec2_response(
        "DescribePlacementGroups", {"placementGroupSet": [_pg_out(g) for g in groups]}
    )


def _template_group(backend: Any, instance: Any) -> str:
    """The placement group the launch template an instance was launched from names (moto
    tags such an instance with the template's id and version, as EC2 does)."""
    tags = {t["key"]: t["value"] for t in instance.get_tags()}
    template_id = tags.get("aws:ec2launchtemplate:id")
    if not template_id:
        return ""
    from moto.ec2.exceptions import EC2ClientError

    try:
        template = backend.get_launch_template(template_id)
        version = template.get_version(tags.get("aws:ec2launchtemplate:version", "$Default"))
    except EC2ClientError:  # the template or version deleted since: the instance stays put
        return ""
    return str((version.data.get("Placement") or {}).get("GroupName") or "")


def _placement_members(account: str, region: str, name: str) -> list[str]:
    """The instances of placement group ``name`` not yet terminated: those launched into it
    (the PCS stand-in records the group) or from a launch template that names it."""
    backend = ec2_backend(account, region)
    return [
        i.id
        for i in backend.all_instances()
        if i.state != "terminated"
        and (getattr(i.placement, "group_name", "") or _template_group(backend, i)) == name
    ]


def _pg_delete(s: World, call: Call) -> Answer:
    name = call.params.get("GroupName", "")
    if (call.region, name) not in s.placement_groups:
        return p.ec2_error(
            400, "InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown."
        )
    # DeletePlacementGroup (the EC2 API reference): all instances in the group must be
    # terminated first; EC2 answers InvalidPlacementGroup.InUse (its error codes) until then.
    members = _placement_members(s.account, call.region, name)
    if members:
        return p.ec2_error(
            400,
            "InvalidPlacementGroup.InUse",
            f"The placement group '{name}' is in use by {len(members)} instance(s) "
            f"({', '.join(sorted(members)[:3])}) and may not be deleted.",
        )
    del s.placement_groups[(call.region, name)]
    return p.ec2_response("DeletePlacementGroup", {"return": True})


def _fsx_out(fs: Timed) -> dict[str, Any]:
    return fs.data


def _fsx_create(s: World, call: Call) -> Answer:
    token = call.params.get("ClientRequestToken")
    known = s.tokens.get((call.region, token)) if token else None
    if known is not None and (call.region, known) in s.file_systems:
        return p.json_response({"FileSystem": _fsx_out(s.file_systems[(call.region, known)])})
    fs_id = f"fs-{_hex()}"
    subnets = call.params.get("SubnetIds", [])
    vpc_id, enis = _fsx_interfaces(s.account, call, subnets, fs_id)
    lustre = fsx_update.repository_configuration(dict(call.params.get("LustreConfiguration", {})))
    lustre["MountName"] = _hex(8)
    data = {
        "OwnerId": s.account,
        "CreationTime": time.time(),
        "FileSystemId": fs_id,
        "FileSystemType": call.params.get("FileSystemType", "LUSTRE"),
        "Lifecycle": "CREATING",
        "StorageCapacity": call.params.get("StorageCapacity", 1200),
        "StorageType": "SSD",
        "SubnetIds": subnets,
        "VpcId": vpc_id,
        "NetworkInterfaceIds": enis,
        "DNSName": f"{fs_id}.fsx.{call.region}.amazonaws.com",
        "ResourceARN": f"arn:aws:fsx:{call.region}:{s.account}:file-system/{fs_id}",
        "Tags": call.params.get("Tags", []),
        "LustreConfiguration": lustre,
        "KmsKeyId": f"arn:aws:kms:{call.region}:{s.account}:key/aws-fsx",
    }
    s.file_systems[(call.region, fs_id)] = Timed(data, s._after("fsx-create"), region=call.region)
    if token:
        s.tokens[(call.region, token)] = fs_id
    return p.json_response({"FileSystem": data})


def _fsx_interfaces(
    account: str, call: Call, subnets: list[str], fs_id: str
) -> tuple[str, list[str]]:
    """The file system's VPC and its network interface, made in moto's EC2 with the
    security groups asked for, as FSx does: ParallelCluster's networking validator reads
    those groups to check that the nodes can reach ports 988 and 1018-1023."""
    backend = ec2_backend(account, call.region)
    try:
        subnet = backend.get_subnet(subnets[0])
    except Exception:  # noqa: BLE001 - unknown subnet: FSx would refuse; the answer keeps a stand-in
        return "vpc-unknown", []
    eni = backend.create_network_interface(
        subnet,
        None,
        group_ids=call.params.get("SecurityGroupIds", []),
        description=f"ENI for FSx file system {fs_id}",
    )
    return str(subnet.vpc_id), [str(eni.id)]


def _release_interfaces(account: str, item: Timed) -> None:
    """A deleted file system's interfaces go with it."""
    backend = ec2_backend(account, item.region)
    for eni in item.data.get("NetworkInterfaceIds", []):
        with contextlib.suppress(Exception):
            backend.delete_network_interface(eni)


def _fsx_describe(s: World, call: Call) -> Answer:
    ids = call.params.get("FileSystemIds")
    here = in_region(s.file_systems, call.region)
    if ids:
        missing = [i for i in ids if i not in here]
        if missing:
            return p.json_error(
                400, "FileSystemNotFound", f"File system '{missing[0]}' does not exist."
            )
    items = [_fsx_out(fs) for key, fs in here.items() if not ids or key in ids]
    return p.json_response({"FileSystems": items})


def _fsx_delete(s: World, call: Call) -> Answer:
    fs_id = call.params.get("FileSystemId", "")
    fs = s.file_systems.get((call.region, fs_id))
    if fs is None:
        return p.json_error(400, "FileSystemNotFound", f"File system '{fs_id}' does not exist.")
    here = in_region(s.associations, call.region)
    if any(a.data["FileSystemId"] == fs_id for a in here.values()):
        return p.json_error(
            400,
            "BadRequest",
            "Cannot delete a file system with data repository associations; delete them first.",
        )
    if fs.deleting_at is None:
        fs.deleting_at = time.monotonic()
        fs.gone_at = s._after("fsx-delete")
        fs.data["Lifecycle"] = "DELETING"
    return p.json_response({"FileSystemId": fs_id, "Lifecycle": "DELETING"})


def _dra_create(s: World, call: Call) -> Answer:
    fs_id = call.params.get("FileSystemId", "")
    fs = s.file_systems.get((call.region, fs_id))
    if fs is None:
        return p.json_error(400, "FileSystemNotFound", f"File system '{fs_id}' does not exist.")
    if fs.data["Lifecycle"] != "AVAILABLE":
        return p.json_error(400, "BadRequest", f"File system '{fs_id}' is not AVAILABLE.")
    token = call.params.get("ClientRequestToken")
    known = s.tokens.get((call.region, token)) if token else None
    if known is not None and (call.region, known) in s.associations:
        return p.json_response({"Association": s.associations[(call.region, known)].data})
    assoc_id = f"dra-{_hex()}"
    data = {
        "AssociationId": assoc_id,
        "FileSystemId": fs_id,
        "Lifecycle": "CREATING",
        "ResourceARN": f"arn:aws:fsx:{call.region}:{s.account}:association/{fs_id}/{assoc_id}",
        "FileSystemPath": call.params.get("FileSystemPath", "/"),
        "DataRepositoryPath": call.params.get("DataRepositoryPath", ""),
        "BatchImportMetaDataOnCreate": call.params.get("BatchImportMetaDataOnCreate", False),
        "S3": call.params.get("S3", {}),
        "Tags": call.params.get("Tags", []),
        "CreationTime": time.time(),
    }
    s.associations[(call.region, assoc_id)] = Timed(
        data, s._after("dra-create"), region=call.region
    )
    if token:
        s.tokens[(call.region, token)] = assoc_id
    return p.json_response({"Association": data})


def _dra_describe(s: World, call: Call) -> Answer:
    ids = call.params.get("AssociationIds")
    filters = {f["Name"]: f["Values"] for f in call.params.get("Filters", [])}
    fs_ids = filters.get("file-system-id")
    items = [
        a.data
        for key, a in in_region(s.associations, call.region).items()
        if (not ids or key in ids) and (not fs_ids or a.data["FileSystemId"] in fs_ids)
    ]
    if ids and not items:
        return p.json_error(400, "DataRepositoryAssociationNotFound", "No such association.")
    return p.json_response({"Associations": items})


def _dra_delete(s: World, call: Call) -> Answer:
    assoc_id = call.params.get("AssociationId", "")
    assoc = s.associations.get((call.region, assoc_id))
    if assoc is None:
        return p.json_error(400, "DataRepositoryAssociationNotFound", "No such association.")
    if assoc.deleting_at is None:
        assoc.deleting_at = time.monotonic()
        assoc.gone_at = s._after("dra-delete")
    return p.json_response(
        {"AssociationId": assoc_id, "Lifecycle": "DELETING", "DeleteDataInFileSystem": False}
    )


def _bucket_policy(s: World, call: Call) -> Answer:
    """S3 bucket policies, kept but not enforced.

    moto 5.2 evaluates a condition on a key it never supplies (aws:SecureTransport) as
    true, so a standard "deny unless TLS" policy would deny every request in the emulator;
    AWS evaluates it against the real connection. The policy is stored and returned as is.
    """
    method, path = call.action.split(" ", 1)
    bucket = path.split("?", 1)[0].strip("/").split("/", 1)[0]
    if method == "PUT":
        s.bucket_policies[bucket] = call.params.get("body", "")
        return 204, {}, b""
    if method == "DELETE":
        s.bucket_policies.pop(bucket, None)
        return 204, {}, b""
    if bucket not in s.bucket_policies:
        xml = (
            b"<Error><Code>NoSuchBucketPolicy</Code><Message>The bucket policy does not "
            b"exist</Message></Error>"
        )
        return 404, {"Content-Type": "application/xml"}, xml
    return 200, {"Content-Type": "application/json"}, s.bucket_policies[bucket].encode()


def _quota(s: World, call: Call) -> Answer:
    service, code = call.params.get("ServiceCode", ""), call.params.get("QuotaCode", "")
    value = s.quota(call.region, service, code)
    if value is None:
        return p.json_error(400, "NoSuchResourceException", "The quota does not exist.")
    return p.json_response(
        {"Quota": {"ServiceCode": service, "QuotaCode": code, "Value": value, "Adjustable": True}}
    )


def _ssm_send(s: World, call: Call) -> Answer:
    return s.ssm.send(call)


def _ssm_get(s: World, call: Call) -> Answer:
    return s.ssm.get(call)


def _ssm_list(s: World, call: Call) -> Answer:
    return s.ssm.listed(call)


_HANDLERS = {
    "DescribeInstanceTopology": describe_instance_topology,
    "CreatePlacementGroup": _pg_create,
    "DescribePlacementGroups": _pg_describe,
    "DeletePlacementGroup": _pg_delete,
    "DescribeCapacityReservations": describe_reservations,
    "DescribeCapacityReservationTopology": describe_reservation_topology,
    "CreateFileSystem": _fsx_create,
    "DescribeFileSystems": _fsx_describe,
    "DeleteFileSystem": _fsx_delete,
    "CreateDataRepositoryAssociation": _dra_create,
    "DescribeDataRepositoryAssociations": _dra_describe,
    "DeleteDataRepositoryAssociation": _dra_delete,
    "GetServiceQuota": _quota,
    "SendCommand": _ssm_send,
    "GetCommandInvocation": _ssm_get,
    "ListCommandInvocations": _ssm_list,
}
