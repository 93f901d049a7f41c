"""Online checks, run by `plan` and `up` before anything is created: the AZ offers each
instance type; each reservation or capacity block exists, is active (or says when it starts),
matches type, platform, kind and AZ and is large enough; the P-instance vCPU quota leaves room;
the file system's S3 data bucket exists in the cluster's region; the VPC, subnets and file
system the spec names exist, fit together and sit in the cluster's AZ; on AWS PCS, PCS answers
in the region, the cluster's name is free and the nodes' AMI exists.

Problems carry spec paths, so they print located in the file like the offline ones.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

from provisioner.catalog import Catalog
from provisioner.drivers.aws import Aws, error_code, transient
from provisioner.drivers.aws_errors import AccessDenied, Invalid, NotFound
from provisioner.resources.block_ends import LEAD_SECONDS
from provisioner.spec.model import ClusterSpec
from provisioner.spec.problems import Level, Problem
from provisioner.validate.online_existing import (
    existing_file_system,
    existing_fsx_ports,
    existing_network,
)

#: Service Quotas: "Running On-Demand P instances" (vCPUs) and "All P Spot Instance Requests".
#: How long before a Capacity Block's end fmctl stops launching into it: its T-60, when the
#: block's schedule winds the pool down (EC2's own warning comes at T-40).
BLOCK_MARGIN_S = LEAD_SECONDS
P_ON_DEMAND_QUOTA = ("ec2", "L-417A185B")
P_SPOT_QUOTA = ("ec2", "L-7212CCBC")


def _zone(aws: Aws, spec: ClusterSpec) -> Iterator[Problem]:
    """The AZ exists for this account (which letters a region has differs by account:
    offline only the name's shape is checked)."""
    az = spec.network.availability_zone
    try:
        zones = aws.client("ec2").describe_availability_zones(
            Filters=[{"Name": "zone-name", "Values": [az]}]
        )["AvailabilityZones"]
    except Invalid:
        zones = []
    if not zones:
        yield Problem(
            "az-missing",
            f"{spec.metadata.region} has no availability zone {az} in this account",
            ("network", "availabilityZone"),
            hint="aws ec2 describe-availability-zones lists the account's zones",
        )


def _offerings(aws: Aws, spec: ClusterSpec) -> Iterator[Problem]:
    ec2 = aws.client("ec2")
    az = spec.network.availability_zone
    types = sorted({p.instance_type for p in spec.compute.gpu_pools})
    offered = {
        o["InstanceType"]
        for o in ec2.describe_instance_type_offerings(
            LocationType="availability-zone",
            Filters=[
                {"Name": "location", "Values": [az]},
                {"Name": "instance-type", "Values": types},
            ],
        )["InstanceTypeOfferings"]
    }
    for i, pool in enumerate(spec.compute.gpu_pools):
        if pool.instance_type not in offered and pool.capacity.type not in (
            "reservation",
            "capacity-block",
        ):
            elsewhere = zones_offering(aws, pool.instance_type)
            yield Problem(
                "az-offering",
                f"{az} does not offer {pool.instance_type}",
                ("compute", "gpuPools", i, "instanceType"),
                hint=(
                    f"zones of {spec.metadata.region} that offer it: {', '.join(elsewhere)}"
                    if elsewhere
                    else f"no zone of {spec.metadata.region} offers it to this account: "
                    "another region, or a reservation or Capacity Block where it is sold"
                ),
                related=(("network", "availabilityZone"),),
            )


def zones_offering(aws: Aws, instance_type: str) -> list[str]:
    """The zones of ``aws``'s region that offer ``instance_type`` to this account, sorted
    (DescribeInstanceTypeOfferings by availability zone)."""
    ec2 = aws.client("ec2")
    found = ec2.describe_instance_type_offerings(
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [instance_type]}],
    )["InstanceTypeOfferings"]
    return sorted({str(o["Location"]) for o in found})


def _reservations(aws: Aws, spec: ClusterSpec) -> Iterator[Problem]:
    ec2 = aws.client("ec2")
    for i, pool in enumerate(spec.compute.gpu_pools):
        rid = pool.capacity.reservation_id
        if rid is None:
            continue
        path = ("compute", "gpuPools", i, "capacity", "reservationId")
        try:
            (res,) = ec2.describe_capacity_reservations(CapacityReservationIds=[rid])[
                "CapacityReservations"
            ]
        except NotFound:
            yield Problem(
                "reservation-missing",
                f"{rid} does not exist in {spec.metadata.region}",
                path,
                hint="check the id and the region; Capacity Blocks are bought in "
                "the EC2 console under Capacity Reservations",
            )
            continue
        yield from _reservation_fit(
            res,
            pool.instance_type,
            pool.count,
            spec.network.availability_zone,
            path,
            pool.capacity.type == "capacity-block",
        )


def _reservation_fit(
    res: Mapping[str, Any], itype: str, count: int, az: str, path: tuple[Any, ...], block: bool
) -> Iterator[Problem]:
    rid = res["CapacityReservationId"]
    # botocore's ec2 model: CapacityReservation.ReservationType is default | capacity-block.
    # Declared the wrong way, the launch template gets the wrong market type and EC2
    # refuses every launch into it.
    kind = res.get("ReservationType")
    if kind == "capacity-block" and not block:
        yield Problem(
            "reservation-mismatch",
            f"{rid} is a Capacity Block, declared as type: reservation",
            (*path[:-1], "type"),
            hint="write capacity: {type: capacity-block, reservationId: " + rid + "}",
        )
    elif kind == "default" and block:
        yield Problem(
            "reservation-mismatch",
            f"{rid} is an On-Demand Capacity Reservation, not a Capacity Block",
            (*path[:-1], "type"),
            hint="write capacity: {type: reservation, reservationId: " + rid + "}",
        )
    if res.get("InstanceType") != itype:
        yield Problem(
            "reservation-mismatch",
            f"{rid} is for {res.get('InstanceType')}, not {itype}",
            path,
            hint="use the reservation's type, or another reservation",
        )
    if res.get("AvailabilityZone") != az:
        yield Problem(
            "reservation-mismatch",
            f"{rid} is in {res.get('AvailabilityZone')}, not {az}",
            path,
            hint=f"set network.availabilityZone to {res.get('AvailabilityZone')}",
        )
    platform = res.get("InstancePlatform")
    if platform not in (None, "Linux/UNIX"):
        yield Problem(
            "reservation-mismatch",
            f"{rid} is for {platform} instances; GPU nodes run Linux/UNIX",
            path,
            hint="use a reservation whose platform is Linux/UNIX",
        )
    state = res.get("State")
    if state == "scheduled" or (block and state == "payment-pending"):
        yield Problem(
            "reservation-not-active",
            f"{rid} is {state}; it starts at {res.get('StartDate', 'its start time')}",
            path,
            level="warning",
            hint="`fmctl up` can create everything else now; nodes join when it starts",
        )
    elif state not in ("active", None):
        yield Problem(
            "reservation-not-active",
            f"{rid} is {state}",
            path,
            hint="only an active (or scheduled) reservation can host instances",
        )
    end = res.get("EndDate")
    if block and isinstance(end, datetime.datetime):
        left = end.timestamp() - time.time()
        ends = end.strftime("%Y-%m-%dT%H:%MZ")
        if left <= 0:
            yield Problem(
                "block-ended",
                f"{rid} ended at {ends}: nothing launches into it any more",
                path,
                hint="use another block, or another capacity type for the pool",
            )
        elif left < BLOCK_MARGIN_S:
            # fmctl stops new work on a block an hour before its end (its T-60; EC2 warns
            # at T-40 and ends the instances at the end): a node launched now would be
            # drained before it did anything.
            yield Problem(
                "block-ending",
                f"{rid} ends at {ends}, in {int(left // 60)} minutes: fmctl launches "
                f"nothing into a block in its last {BLOCK_MARGIN_S // 60} minutes",
                path,
                hint="extend the block (aws ec2 describe-capacity-block-extension-offerings, "
                "then purchase-capacity-block-extension), or use a later block",
            )
    total = int(res.get("TotalInstanceCount", 0))
    if total < count:
        yield Problem(
            "reservation-too-small",
            f"{rid} holds {total} instances; the pool asks for {count}",
            path,
            hint=f"set count to at most {total}",
        )


def _quota(aws: Aws, spec: ClusterSpec, catalog: Catalog) -> Iterator[Problem]:
    needed = {"on-demand": 0, "spot": 0}
    for pool in spec.compute.gpu_pools:
        itype = catalog.get(pool.instance_type)
        if itype is None or not itype.name.startswith("p"):
            continue
        if pool.capacity.type == "on-demand":
            needed["on-demand"] += itype.cpu.vcpus * pool.count
        elif pool.capacity.type == "spot":
            needed["spot"] += itype.cpu.vcpus * pool.count
    quotas = aws.client("service-quotas")
    for kind, (service, code) in (("on-demand", P_ON_DEMAND_QUOTA), ("spot", P_SPOT_QUOTA)):
        if not needed[kind]:
            continue
        try:
            value = quotas.get_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]["Value"]
        except (AccessDenied, NotFound):
            continue  # not visible to these credentials: AWS will say at launch
        if needed[kind] > value:
            yield Problem(
                "quota",
                f"the pools need {needed[kind]} {kind} P-instance vCPUs; the "
                f"quota in {spec.metadata.region} is {value:g}",
                ("compute", "gpuPools"),
                hint=f"request an increase of quota {code} in Service Quotas, or "
                "use a reservation or capacity block (they do not count against it)",
            )


def _data_bucket(aws: Aws, spec: ClusterSpec) -> Iterator[Problem]:
    """The S3 bucket of the file system's data repository exists, is reachable and is in the
    cluster's region (FSx links a bucket of its own region only)."""
    fsx = spec.storage.fsx_lustre
    if fsx is None or fsx.s3 is None or fsx.file_system_id is not None:
        return
    s3 = aws.client("s3")
    checked: set[str] = set()
    for field in ("import_path", "export_path"):
        uri = getattr(fsx.s3, field)
        bucket = str(uri or "").removeprefix("s3://").split("/", 1)[0]
        if not bucket or bucket in checked:
            continue
        checked.add(bucket)
        key = "importPath" if field == "import_path" else "exportPath"
        path = ("storage", "fsxLustre", "s3", key)
        try:
            where = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint") or "us-east-1"
        except NotFound:
            yield Problem(
                "data-bucket-missing",
                f"bucket {bucket} does not exist",
                path,
                hint="create it, or correct the name (fmctl links it; it never creates "
                "or deletes your data bucket)",
            )
            continue
        except AccessDenied:
            yield Problem(
                "data-bucket-missing",
                f"bucket {bucket} is not readable with these credentials",
                path,
                hint="FSx reads it with its service role; fmctl needs s3:GetBucketLocation",
            )
            continue
        if where != spec.metadata.region:
            yield Problem(
                "data-bucket-region",
                f"bucket {bucket} is in {where}; the cluster is in {spec.metadata.region}",
                path,
                hint="FSx for Lustre links buckets of its own region only: replicate the "
                "data to a bucket there",
            )


def _key_pair(aws: Aws, spec: ClusterSpec) -> Iterator[Problem]:
    """The head node's key pair exists in the region (ParallelCluster's KeyPairValidator
    would refuse it, later)."""
    key = spec.compute.head_node.key_name
    if spec.scheduler != "slurm" or key is None:
        return
    try:
        aws.client("ec2").describe_key_pairs(KeyNames=[key])
    except NotFound:
        yield Problem(
            "key-pair-missing",
            f"no key pair {key!r} in {spec.metadata.region}",
            ("compute", "headNode", "keyName"),
            hint="aws ec2 describe-key-pairs lists them; key pairs are per region",
        )


def _log_group(aws: Aws, spec: ClusterSpec) -> Iterator[Problem]:
    """EKS writes the control-plane logs to /aws/eks/NAME/cluster: a group of that name
    that is not this cluster's holds someone's logs, which fmctl neither adopts nor
    deletes (the judgement LogGroup's create makes too)."""
    if spec.scheduler != "kubernetes":
        return
    from provisioner.resources.logs import FOREIGN_HINT, control_plane_group, foreign_holder

    name = spec.metadata.name
    holder = foreign_holder(aws, name)
    if holder is not None:
        group = control_plane_group(name)
        yield Problem(
            "log-group-foreign",
            f"log group {group} exists and is not this cluster's: it holds the control-plane "
            f"logs of {holder}",
            ("metadata", "name"),
            hint=FOREIGN_HINT.format(group=group),
        )


#: Where Cost Explorer's cost allocation tags are asked (its one endpoint).
CE_REGION = "us-east-1"
BUDGETS = "budgets.amazonaws.com"


def _budget(aws: Aws, spec: ClusterSpec) -> Iterator[Problem]:
    """cost.budget counts only what carries an active cost allocation tag (the Billing User
    Guide: a user-defined tag counts from its activation on, and is listed for activation
    up to a day after it is first used), and tells an SNS topic only if the topic is there
    and its access policy lets budgets.amazonaws.com publish (an AWS managed key cannot be
    made to let it: the SNS Developer Guide on encrypted topics)."""
    budget = spec.cost.budget
    if budget is None:
        return
    from provisioner.resources.tags import OWNER_TAG

    try:
        listed = (
            aws.in_region(CE_REGION)
            .client("ce")
            .list_cost_allocation_tags(TagKeys=[OWNER_TAG], Type="UserDefined")
        )
        active = any(
            t["TagKey"] == OWNER_TAG and t.get("Status") == "Active"
            for t in listed.get("CostAllocationTags", [])
        )
        why = None if active else f"{OWNER_TAG} is not an active cost allocation tag"
    except Exception as exc:
        if error_code(exc) is None and not transient(exc):
            raise  # not AWS's answer: a bug, not a refusal to say
        why = f"could not read the cost allocation tags ({error_code(exc) or exc})"
    if why:
        yield Problem(
            "budget-tag-inactive",
            f"{why}: the budget counts nothing it has not, and with actions: stop it never "
            "stops the cluster",
            ("cost", "budget"),
            hint=f"activate it in the management account (Billing console, Cost allocation "
            f"tags; or aws ce update-cost-allocation-tags-status --cost-allocation-tags-status "
            f"TagKey={OWNER_TAG},Status=Active); a new tag is listed up to a day after its "
            "first use",
            level="warning",
        )
    for index, address in enumerate(budget.notify):
        if not address.startswith("arn:"):
            continue
        refused = _topic_refuses(aws, address)
        if refused is not None:
            message, level = refused
            yield Problem(
                "budget-topic",
                message,
                ("cost", "budget", "notify", index),
                hint="add to the topic's access policy a statement allowing the service "
                f"principal {BUDGETS} sns:Publish (aws:SourceAccount: this account), and for "
                "an encrypted topic a customer managed key whose policy lets it "
                "kms:GenerateDataKey* and kms:Decrypt",
                level=level,
            )


def _topic_refuses(aws: Aws, arn: str) -> tuple[str, Level] | None:
    """Why AWS Budgets could not publish to the topic (and how sure that is), or None."""
    region = arn.split(":")[3]
    try:
        attributes = (
            aws.in_region(region).client("sns").get_topic_attributes(TopicArn=arn)["Attributes"]
        )
    except Exception as exc:
        code = error_code(exc)
        if code is None and not transient(exc):
            raise  # not AWS's answer: a bug, not a topic to judge
        if isinstance(exc, NotFound):
            return f"SNS topic {arn} does not exist: the budget's notifications are lost", "error"
        return f"could not read SNS topic {arn} ({code or exc}): not checked", "warning"
    policy = json.loads(attributes.get("Policy") or "{}")
    statements = policy.get("Statement") or []
    if not any(_lets_budgets_publish(s) for s in _listed(statements)):
        return f"SNS topic {arn} does not let {BUDGETS} publish: Budgets cannot tell it", "error"
    key = str(attributes.get("KmsMasterKeyId") or "")
    if key.startswith("alias/aws/") or key.endswith(":alias/aws/sns"):
        return f"SNS topic {arn} is encrypted with the AWS managed key: Budgets may not use it", (
            "error"
        )
    return None


def _lets_budgets_publish(statement: dict[str, Any]) -> bool:
    """A statement naming budgets.amazonaws.com, or everyone without conditions. SNS's
    default policy (everyone, on the condition the caller is the owner: AWS:SourceOwner)
    does not: the Billing User Guide has the statement for Budgets added."""
    principal = statement.get("Principal")
    anyone = principal == "*" or (
        isinstance(principal, dict) and "*" in _listed(principal.get("AWS"))
    )
    if anyone:
        allowed = not statement.get("Condition")
    elif isinstance(principal, dict):
        allowed = BUDGETS in _listed(principal.get("Service"))
    else:
        allowed = False
    actions = {str(a).lower() for a in _listed(statement.get("Action"))}
    return (
        statement.get("Effect") == "Allow"
        and allowed
        and bool(actions & {"sns:publish", "sns:*", "*"})
    )


def _listed(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _pcs(aws: Aws, spec: ClusterSpec, catalog: Catalog) -> Iterator[Problem]:
    """Slurm on AWS PCS: PCS answers in the region; no PCS cluster of the name belongs to
    someone else (CreateCluster would answer ConflictException mid-way); the nodes' AMI
    exists: slurm.amiId, or AWS's sample AMI for the Slurm version and each architecture."""
    if spec.scheduler != "slurm" or spec.slurm.provider != "pcs":
        return
    from botocore.exceptions import EndpointConnectionError

    from provisioner.catalog.pcs import ROOT_DEVICE, SAMPLE_AMI_OWNER, sample_ami_name
    from provisioner.render.pcs import login_architecture
    from provisioner.resources.tags import OWNER_TAG

    region, name = spec.metadata.region, spec.metadata.name
    pcs = aws.client("pcs")
    try:
        clusters = [c for p in pcs.get_paginator("list_clusters").paginate() for c in p["clusters"]]
    except EndpointConnectionError as exc:
        yield Problem(
            "pcs-region",
            f"AWS PCS does not answer in {region} ({exc})",
            ("metadata", "region"),
            hint="a region PCS is offered in (the AWS General Reference lists its endpoints), "
            "or slurm.provider: parallelcluster",
        )
        return
    for cluster in clusters:
        if cluster["name"] != name:
            continue
        try:
            tags = pcs.list_tags_for_resource(resourceArn=cluster["arn"])["tags"]
        except NotFound:
            continue  # deleted between the list and the read
        if tags.get(OWNER_TAG) != name:
            yield Problem(
                "pcs-name-taken",
                f"a PCS cluster named {name} ({cluster['id']}) exists in {region} and is not "
                "this cluster's",
                ("metadata", "name"),
                hint="name this cluster differently; fmctl never takes over what it did not make",
            )
    ec2 = aws.client("ec2")
    if spec.slurm.ami_id:
        found = ec2.describe_images(Filters=[{"Name": "image-id", "Values": [spec.slurm.ami_id]}])[
            "Images"
        ]
        if not found:
            yield Problem(
                "pcs-ami",
                f"no AMI {spec.slurm.ami_id} in {region}",
                ("slurm", "amiId"),
                hint="AMIs are per region; copy it here, or leave amiId out for AWS's sample AMI",
            )
        elif found[0].get("RootDeviceName", ROOT_DEVICE) != ROOT_DEVICE:
            # The launch templates size and encrypt the root volume by this name (the PCS
            # sample AMIs' and Amazon Linux's root); another name would add a second volume
            # and leave the AMI's own root as it is.
            yield Problem(
                "pcs-ami",
                f"AMI {spec.slurm.ami_id}'s root device is {found[0]['RootDeviceName']}: "
                f"fmctl's PCS launch templates give the root volume as {ROOT_DEVICE}",
                ("slurm", "amiId"),
                hint=f"an AMI whose root device is {ROOT_DEVICE} (Amazon Linux based, as the "
                "PCS sample AMIs are)",
            )
        return
    version = spec.slurm.pcs.slurm_version
    archs = {login_architecture(spec.compute.head_node.instance_type)}
    archs |= {t.architecture for p in spec.compute.gpu_pools if (t := catalog.get(p.instance_type))}
    for arch in sorted(archs):
        image = sample_ami_name(version, arch)
        found = ec2.describe_images(
            Owners=[SAMPLE_AMI_OWNER],
            Filters=[
                {"Name": "name", "Values": [f"{image}*"]},
                {"Name": "architecture", "Values": [arch]},
            ],
        )["Images"]
        if not found:
            yield Problem(
                "pcs-ami",
                f"AWS's PCS sample AMI {image} is not offered in {region}",
                ("slurm", "pcs", "slurmVersion"),
                hint="another slurmVersion, or slurm.amiId: an AMI built for PCS (AWS's PCS "
                "AMI recipes install its agent and Slurm)",
            )


def online_problems(aws: Aws, spec: ClusterSpec, catalog: Catalog) -> list[Problem]:
    """Every online problem of a resolved spec."""
    zone = list(_zone(aws, spec))
    if zone:  # nothing else can be judged in a zone that is not there
        return zone
    return [
        *_offerings(aws, spec),
        *_reservations(aws, spec),
        *_quota(aws, spec, catalog),
        *_data_bucket(aws, spec),
        *existing_network(aws, spec),
        *existing_file_system(aws, spec),
        *existing_fsx_ports(aws, spec),
        *_log_group(aws, spec),
        *_key_pair(aws, spec),
        *_pcs(aws, spec, catalog),
        *_budget(aws, spec),
    ]
