"""The AWS PCS cluster's and queue's verbs against answers in PCS's shapes (AWS publishes no
examples for PCS; botocore's Stubber holds each answer to the service's model): read finds
the cluster's own by its tags, diff tells an upgrade in place from a change PCS cannot make,
a create whose answer was lost ends with the one PCS made (its client token; the name in use
by this cluster's own), and a delete waits until PCS no longer knows it, then sweeps the
instances PCS left."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from provisioner.graph.ref import Ref
from provisioner.resources.base import How, Owned, Request
from provisioner.resources.compute import SgOut
from provisioner.resources.context import Context
from provisioner.resources.errors import ResourceError
from provisioner.resources.iam import RoleOut
from provisioner.resources.launch_template import LtOut
from provisioner.resources.network import SubnetOut
from provisioner.resources.pcs import (
    NodeGroupOut,
    PcsCluster,
    PcsClusterOut,
    PcsClusterParams,
    digest,
    request_of_networking,
)
from provisioner.resources.pcs_nodes import NodeGroupParams, PcsNodeGroup
from provisioner.resources.pcs_queues import PcsQueue, QueueOut, QueueParams
from tests.resources.contract import covers
from tests.resources.recorded import ACCOUNT, RecordedAws, tags
from tests.resources.test_lifecycle_verbs import CLUSTER, _tags

ID = "pcs_0abcdef123"
ARN = f"arn:aws:pcs:us-east-1:{ACCOUNT}:cluster/{ID}"
WHEN = datetime.datetime(2026, 11, 30, 10, 0, tzinfo=datetime.UTC)


def _ctx(aws: RecordedAws) -> Context:
    ctx = Context(aws=aws, cluster=CLUSTER, region="us-east-1", time_scale=0.001)  # type: ignore[arg-type]
    ctx.record("subnet/private", SubnetOut("subnet-9d4a7b6c", "us-east-1a"))
    ctx.record("sg/pcs", SgOut("sg-903004f8"))
    return ctx


def _params(version: str = "24.11", size: str = "SMALL") -> PcsClusterParams:
    return PcsClusterParams(
        CLUSTER,
        version,
        size,
        (Ref("subnet/private", SubnetOut),),
        (Ref("sg/pcs", SgOut),),
        600,
        (("SelectTypeParameters", "CR_Core_Memory"),),
        "NONE",
        _tags("pcs"),
    )


def _cluster(status: str = "ACTIVE", **changes: Any) -> dict[str, Any]:
    """A cluster as GetCluster shows it."""
    item = {
        "name": CLUSTER,
        "id": ID,
        "arn": ARN,
        "status": status,
        "createdAt": WHEN,
        "modifiedAt": WHEN,
        "scheduler": {"type": "SLURM", "version": "24.11"},
        "size": "SMALL",
        "slurmConfiguration": {
            "scaleDownIdleTimeInSeconds": 600,
            "slurmCustomSettings": [
                {"parameterName": "SelectTypeParameters", "parameterValue": "CR_Core_Memory"}
            ],
            "accounting": {"mode": "NONE"},
        },
        "networking": {"subnetIds": ["subnet-9d4a7b6c"], "securityGroupIds": ["sg-903004f8"]},
        "endpoints": [{"type": "SLURMCTLD", "privateIpAddress": "10.0.1.12", "port": "6817"}],
    }
    item.update(changes)
    return {"cluster": item}


def _summary(status: str = "ACTIVE", name: str = CLUSTER, cid: str = ID) -> dict[str, Any]:
    return {
        "name": name,
        "id": cid,
        "arn": f"arn:aws:pcs:us-east-1:{ACCOUNT}:cluster/{cid}",
        "createdAt": WHEN,
        "modifiedAt": WHEN,
        "status": status,
    }


def _tag_map(cluster: str = CLUSTER, resource: str = "pcs") -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in tags(cluster, resource, team="ml")}


def _mine(aws: RecordedAws, *extra: dict[str, Any]) -> None:
    """ListClusters (this cluster's and others'), the tags of each, GetCluster of ours."""
    listed = [*extra, _summary()]
    aws.answer("pcs", "ListClusters", {"clusters": listed})
    for item in extra:
        aws.answer(
            "pcs", "ListTagsForResource", {"tags": _tag_map("other")}, {"resourceArn": item["arn"]}
        )
    aws.answer("pcs", "ListTagsForResource", {"tags": _tag_map()}, {"resourceArn": ARN})
    aws.answer("pcs", "GetCluster", _cluster(), {"clusterIdentifier": ID})


@covers("pcs-cluster", "read", "diff")
def test_the_pcs_cluster_is_read_by_its_tags_upgraded_in_place_and_never_resized() -> None:
    aws = RecordedAws()
    _mine(aws, _summary(name="theirs", cid="pcs_0fedcba987"))
    aws.answer("pcs", "ListTagsForResource", {"tags": _tag_map()}, {"resourceArn": ARN})
    ctx = _ctx(aws)
    req = Request(ctx, "pcs", _params())
    observed = PcsCluster().read(req)
    aws.done()
    assert observed is not None and observed.outputs == PcsClusterOut(ID, ARN, "10.0.1.12:6817")
    assert PcsCluster().diff(req, observed) == []
    newer = {
        c.path: c.how for c in PcsCluster().diff(Request(ctx, "pcs", _params("25.05")), observed)
    }
    assert newer == {"slurm_version": How.UPDATE}
    older = {
        c.path: c.how for c in PcsCluster().diff(Request(ctx, "pcs", _params("23.11")), observed)
    }
    assert older == {"slurm_version": How.IMMUTABLE}
    bigger = {
        c.path: c.how
        for c in PcsCluster().diff(Request(ctx, "pcs", _params(size="LARGE")), observed)
    }
    assert bigger == {"size": How.IMMUTABLE}


@covers("pcs-cluster", "create-adopts")
def test_a_pcs_clusters_create_carries_one_token_and_a_name_in_use_by_its_own_is_waited_for() -> (
    None
):
    aws = RecordedAws()
    ctx = _ctx(aws)
    params = _params()
    token = ctx.token(f"pcs/{digest(request_of_networking(ctx, params))}")
    request = {
        "clusterName": CLUSTER,
        "scheduler": {"type": "SLURM", "version": "24.11"},
        "size": "SMALL",
        "networking": {"subnetIds": ["subnet-9d4a7b6c"], "securityGroupIds": ["sg-903004f8"]},
        "slurmConfiguration": {
            "scaleDownIdleTimeInSeconds": 600,
            "slurmCustomSettings": [
                {"parameterName": "SelectTypeParameters", "parameterValue": "CR_Core_Memory"}
            ],
            "accounting": {"mode": "NONE"},
        },
        "clientToken": token,
        "tags": _Tags(_tags("pcs").at_creation()),
    }
    aws.answer("pcs", "CreateCluster", _cluster("CREATING"), request)
    aws.answer("pcs", "GetCluster", _cluster("CREATING"))
    aws.answer("pcs", "GetCluster", _cluster("ACTIVE"))
    assert PcsCluster().create(Request(ctx, "pcs", params)) == PcsClusterOut(
        ID, ARN, "10.0.1.12:6817"
    )
    aws.done()
    # The retry after a lost answer, or a re-run: PCS says the name is in use (Conflict);
    # it is this cluster's (tagged), so it is waited for, not made again.
    again = RecordedAws()
    again.fail("pcs", "CreateCluster", "ConflictException", 409)
    again.answer("pcs", "GetCluster", _cluster("CREATING"), {"clusterIdentifier": CLUSTER})
    again.answer("pcs", "ListTagsForResource", {"tags": _tag_map()})
    again.answer("pcs", "GetCluster", _cluster("ACTIVE"))
    assert PcsCluster().create(Request(_ctx(again), "pcs", params)).id == ID
    again.done()
    theirs = RecordedAws()
    theirs.fail("pcs", "CreateCluster", "ConflictException", 409)
    theirs.answer("pcs", "GetCluster", _cluster("ACTIVE"))
    theirs.answer("pcs", "ListTagsForResource", {"tags": _tag_map("other")})
    with pytest.raises(ResourceError, match="is not llm's"):
        PcsCluster().create(Request(_ctx(theirs), "pcs", params))
    theirs.done()


class _Tags(dict):  # type: ignore[type-arg]
    """The creation tags, with any creation stamp."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, dict):
            return False
        stamped = {k for k in other if k.endswith("created-at")}
        return {k: v for k, v in other.items() if k not in stamped} == {
            k: v for k, v in self.items() if k not in stamped
        }

    def __ne__(self, other: object) -> bool:  # the stubber compares with !=
        return not self == other

    __hash__ = None  # type: ignore[assignment]


@covers("pcs-cluster", "delete")
def test_a_pcs_cluster_delete_waits_until_pcs_no_longer_knows_it_then_sweeps_its_instances() -> (
    None
):
    owned = Owned("pcs-cluster", "pcs", ID)
    aws = RecordedAws()
    ctx = _ctx(aws)
    aws.answer("pcs", "GetCluster", _cluster())
    expected = {"clusterIdentifier": ID, "clientToken": ctx.token(f"pcs/delete/{ID}")}
    aws.answer("pcs", "DeleteCluster", {}, expected)
    aws.answer("pcs", "GetCluster", _cluster("DELETING"))
    aws.fail("pcs", "GetCluster", "ResourceNotFoundException", 404)
    left = {"Reservations": [{"Instances": [{"InstanceId": "i-0123456789abcdef0"}]}]}
    filters = [
        {"Name": "tag:aws:pcs:cluster-id", "Values": [ID]},
        {"Name": "tag:fmctl.dev/cluster", "Values": [CLUSTER]},
        {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
    ]
    aws.answer("ec2", "DescribeInstances", left, {"Filters": filters})
    aws.answer("ec2", "TerminateInstances", {}, {"InstanceIds": ["i-0123456789abcdef0"]})
    aws.answer("ec2", "DescribeInstances", {"Reservations": []})
    PcsCluster().delete(ctx, owned)
    aws.done()
    gone = RecordedAws()
    gone.fail("pcs", "GetCluster", "ResourceNotFoundException", 404)
    PcsCluster().delete(_ctx(gone), owned)
    gone.done()


def _queue(status: str = "ACTIVE", groups: tuple[str, ...] = ("pcs_ng_train",)) -> dict[str, Any]:
    return {
        "name": "train",
        "id": "pcs_q_train",
        "arn": f"arn:aws:pcs:us-east-1:{ACCOUNT}:cluster/{ID}/queue/pcs_q_train",
        "clusterId": ID,
        "createdAt": WHEN,
        "modifiedAt": WHEN,
        "status": status,
        "computeNodeGroupConfigurations": [{"computeNodeGroupId": g} for g in groups],
    }


def _queue_params(ctx: Context, *groups: str) -> QueueParams:
    ctx.record("pcs", PcsClusterOut(ID, ARN, "10.0.1.12:6817"))
    refs = []
    for n, group in enumerate(groups):
        ctx.record(f"pcs/ng/{n}", NodeGroupOut(group))
        refs.append(Ref(f"pcs/ng/{n}", NodeGroupOut))
    return QueueParams(Ref("pcs", PcsClusterOut), "train", tuple(refs), _tags("pcs/queue/train"))


@covers("pcs-queue", "read", "diff")
def test_a_queue_is_read_through_the_clusters_own_and_its_node_groups_change_in_place() -> None:
    aws = RecordedAws()
    _mine(aws)
    summary = {k: v for k, v in _queue().items() if k != "computeNodeGroupConfigurations"}
    aws.answer("pcs", "ListQueues", {"queues": [summary]}, {"clusterIdentifier": ID})
    aws.answer("pcs", "ListTagsForResource", {"tags": _tag_map(resource="pcs/queue/train")})
    aws.answer("pcs", "GetQueue", {"queue": _queue()})
    for _ in range(2):  # its tags, read for the resource and for the live view
        aws.answer("pcs", "ListTagsForResource", {"tags": _tag_map(resource="pcs/queue/train")})
    ctx = _ctx(aws)
    req = Request(ctx, "pcs/queue/train", _queue_params(ctx, "pcs_ng_train"))
    observed = PcsQueue().read(req)
    aws.done()
    assert observed is not None and observed.outputs == QueueOut("pcs_q_train")
    assert observed.id == f"{ID}/pcs_q_train"
    assert PcsQueue().diff(req, observed) == []
    two = Request(ctx, "pcs/queue/train", _queue_params(ctx, "pcs_ng_train", "pcs_ng_more"))
    (change,) = PcsQueue().diff(two, observed)
    assert (change.path, change.how) == ("node_groups", How.UPDATE)


@covers("pcs-queue", "create-adopts")
def test_a_queues_create_carries_one_token_per_cluster_and_waits_for_it() -> None:
    tokens = []
    for _run in range(2):
        aws = RecordedAws()
        ctx = _ctx(aws)
        params = _queue_params(ctx, "pcs_ng_train")
        tokens.append(ctx.token(f"pcs/queue/train/{ID}"))
        request = {
            "clusterIdentifier": ID,
            "queueName": "train",
            "computeNodeGroupConfigurations": [{"computeNodeGroupId": "pcs_ng_train"}],
            "clientToken": tokens[-1],
            "tags": _Tags(_tags("pcs/queue/train").at_creation()),
        }
        aws.answer("pcs", "CreateQueue", {"queue": _queue("CREATING")}, request)
        aws.answer("pcs", "GetQueue", {"queue": _queue("CREATING")})
        aws.answer("pcs", "GetQueue", {"queue": _queue()})
        assert PcsQueue().create(Request(ctx, "pcs/queue/train", params)) == QueueOut("pcs_q_train")
        aws.done()
    assert tokens[0] == tokens[1]
    failed = RecordedAws()
    ctx = _ctx(failed)
    broken = dict(_queue("CREATE_FAILED"), errorInfo=[{"code": "Internal", "message": "try later"}])
    failed.answer("pcs", "CreateQueue", {"queue": _queue("CREATING")})
    failed.answer("pcs", "GetQueue", {"queue": broken})
    with pytest.raises(ResourceError, match="CREATE_FAILED: Internal: try later"):
        PcsQueue().create(Request(ctx, "pcs/queue/train", _queue_params(ctx, "pcs_ng_train")))


@covers("pcs-queue", "delete")
def test_a_queue_delete_waits_until_pcs_no_longer_knows_it() -> None:
    owned = Owned("pcs-queue", "pcs/queue/train", f"{ID}/pcs_q_train")
    aws = RecordedAws()
    ctx = _ctx(aws)
    token = ctx.token(f"pcs/queue/train/delete/{ID}/pcs_q_train")
    expected = {"clusterIdentifier": ID, "queueIdentifier": "pcs_q_train", "clientToken": token}
    aws.answer("pcs", "DeleteQueue", {}, expected)
    aws.answer("pcs", "GetQueue", {"queue": _queue("DELETING")})
    aws.fail("pcs", "GetQueue", "ResourceNotFoundException", 404)
    PcsQueue().delete(ctx, owned)
    aws.fail("pcs", "DeleteQueue", "ResourceNotFoundException", 404)
    aws.fail("pcs", "GetQueue", "ResourceNotFoundException", 404)
    PcsQueue().delete(_ctx(aws), owned)
    aws.done()


GROUP = "pcs_ng_train"
PROFILE = f"arn:aws:iam::{ACCOUNT}:instance-profile/aws-pcs/fmctl-llm-us-east-1-pcs-node"


def _group_params(
    ctx: Context, max_count: int = 4, instance_type: str = "p5.48xlarge"
) -> NodeGroupParams:
    ctx.record("pcs", PcsClusterOut(ID, ARN, "10.0.1.12:6817"))
    ctx.record("launch-template/train", LtOut("lt-01238c059e3466abc", 3))
    role = PROFILE.replace(":instance-profile/", ":role/")
    ctx.record("iam/pcs-node", RoleOut("fmctl-llm-us-east-1-pcs-node", role))
    return NodeGroupParams(
        Ref("pcs", PcsClusterOut),
        "train",
        "ami-0a1b2c3d4e5f60002",
        (Ref("subnet/private", SubnetOut),),
        "CAPACITY_BLOCK",
        Ref("launch-template/train", LtOut),
        Ref("iam/pcs-node", RoleOut),
        0,
        max_count,
        instance_type,
        _tags("pcs/ng/train"),
    )


def _group(status: str = "ACTIVE", max_count: int = 4) -> dict[str, Any]:
    """A node group as GetComputeNodeGroup shows it."""
    return {
        "name": "train",
        "id": GROUP,
        "arn": f"{ARN}/computenodegroup/{GROUP}",
        "clusterId": ID,
        "createdAt": WHEN,
        "modifiedAt": WHEN,
        "status": status,
        "amiId": "ami-0a1b2c3d4e5f60002",
        "subnetIds": ["subnet-9d4a7b6c"],
        "purchaseOption": "CAPACITY_BLOCK",
        "customLaunchTemplate": {"id": "lt-01238c059e3466abc", "version": "3"},
        "iamInstanceProfileArn": PROFILE,
        "scalingConfiguration": {"minInstanceCount": 0, "maxInstanceCount": max_count},
        "instanceConfigs": [{"instanceType": "p5.48xlarge"}],
    }


@covers("pcs-node-group", "read", "diff")
def test_a_node_group_is_read_by_its_tags_scales_in_place_and_a_new_type_replaces_it() -> None:
    aws = RecordedAws()
    _mine(aws)
    summary = {
        k: _group()[k]
        for k in ("name", "id", "arn", "clusterId", "createdAt", "modifiedAt", "status")
    }
    aws.answer(
        "pcs", "ListComputeNodeGroups", {"computeNodeGroups": [summary]}, {"clusterIdentifier": ID}
    )
    tagged = {"tags": _tag_map(resource="pcs/ng/train")}
    aws.answer("pcs", "ListTagsForResource", tagged)  # is it the cluster's?
    aws.answer("pcs", "GetComputeNodeGroup", {"computeNodeGroup": _group()})
    aws.answer("pcs", "ListTagsForResource", tagged)  # which pool's?
    aws.answer("pcs", "ListTagsForResource", tagged)  # the live view's tags
    ctx = _ctx(aws)
    req = Request(ctx, "pcs/ng/train", _group_params(ctx))
    observed = PcsNodeGroup().read(req)
    aws.done()
    assert observed is not None and observed.outputs == NodeGroupOut(GROUP)
    assert observed.id == f"{ID}/{GROUP}"
    assert PcsNodeGroup().diff(req, observed) == []
    (smaller,) = PcsNodeGroup().diff(Request(ctx, "pcs/ng/train", _group_params(ctx, 2)), observed)
    assert (smaller.path, smaller.how) == ("max_count", How.UPDATE)
    assert smaller.note is not None and "train-[3-4]" in smaller.note  # the nodes drained first
    other = PcsNodeGroup().diff(
        Request(ctx, "pcs/ng/train", _group_params(ctx, 4, "p5en.48xlarge")), observed
    )
    assert {c.path: c.how for c in other} == {"instance_type": How.REPLACE}


@covers("pcs-node-group", "create-adopts")
def test_a_node_groups_create_carries_one_token_and_a_name_in_use_by_its_own_is_waited_for() -> (
    None
):
    tokens = []
    for _run in range(2):
        aws = RecordedAws()
        ctx = _ctx(aws)
        params = _group_params(ctx)
        tokens.append(ctx.token(f"pcs/ng/train/{ID}/train"))
        request = {
            "amiId": "ami-0a1b2c3d4e5f60002",
            "subnetIds": ["subnet-9d4a7b6c"],
            "purchaseOption": "CAPACITY_BLOCK",
            "customLaunchTemplate": {"id": "lt-01238c059e3466abc", "version": "3"},
            "iamInstanceProfileArn": PROFILE,
            "scalingConfiguration": {"minInstanceCount": 0, "maxInstanceCount": 4},
            "clusterIdentifier": ID,
            "computeNodeGroupName": "train",
            "instanceConfigs": [{"instanceType": "p5.48xlarge"}],
            "clientToken": tokens[-1],
            "tags": _Tags(_tags("pcs/ng/train").at_creation()),
        }
        aws.answer(
            "pcs", "CreateComputeNodeGroup", {"computeNodeGroup": _group("CREATING")}, request
        )
        aws.answer("pcs", "GetComputeNodeGroup", {"computeNodeGroup": _group("CREATING")})
        aws.answer("pcs", "GetComputeNodeGroup", {"computeNodeGroup": _group()})
        assert PcsNodeGroup().create(Request(ctx, "pcs/ng/train", params)) == NodeGroupOut(GROUP)
        aws.done()
    assert tokens[0] == tokens[1]
    # PCS answers ConflictException while something the group depends on is changing: the
    # same request (the same token) goes again until PCS takes it.
    busy = RecordedAws()
    ctx = _ctx(busy)
    busy.fail("pcs", "CreateComputeNodeGroup", "ConflictException", 409)
    busy.answer(
        "pcs",
        "CreateComputeNodeGroup",
        {"computeNodeGroup": _group("CREATING")},
        {**request, "clientToken": ctx.token(f"pcs/ng/train/{ID}/train")},
    )
    busy.answer("pcs", "GetComputeNodeGroup", {"computeNodeGroup": _group()})
    assert PcsNodeGroup().create(Request(ctx, "pcs/ng/train", _group_params(ctx))) == NodeGroupOut(
        GROUP
    )
    busy.done()


@covers("pcs-node-group", "delete")
def test_a_node_group_delete_waits_until_pcs_no_longer_knows_it_then_sweeps_its_instances() -> None:
    owned = Owned("pcs-node-group", "pcs/ng/train", f"{ID}/{GROUP}")
    aws = RecordedAws()
    ctx = _ctx(aws)
    token = ctx.token(f"pcs/ng/train/delete/{ID}/{GROUP}")
    expected = {"clusterIdentifier": ID, "computeNodeGroupIdentifier": GROUP, "clientToken": token}
    aws.answer("pcs", "DeleteComputeNodeGroup", {}, expected)
    aws.answer("pcs", "GetComputeNodeGroup", {"computeNodeGroup": _group("DELETING")})
    aws.fail("pcs", "GetComputeNodeGroup", "ResourceNotFoundException", 404)
    filters = [
        {"Name": "tag:aws:pcs:compute-node-group-id", "Values": [GROUP]},
        {"Name": "tag:fmctl.dev/cluster", "Values": [CLUSTER]},
        {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
    ]
    aws.answer("ec2", "DescribeInstances", {"Reservations": []}, {"Filters": filters})
    PcsNodeGroup().delete(ctx, owned)
    aws.done()


def test_lifecycle_actions_compare_as_pcs_may_answer_them() -> None:
    """What `up` asks and what PCS answers compare equal whether PCS spells its defaults
    out (onError TERMINATE, executionPolicy FIRST_BOOT_ONLY, scriptCachingPolicy
    CACHE_ONCE: botocore's PCS model) or leaves empty members in; no script is none."""
    from provisioner.resources.pcs_nodes import canonical_actions

    asked = {
        "stages": {
            "nodeBootstrapped": [
                {"name": "fmctl-verify", "scriptSource": {"scriptLocation": "s3://b/k.sh"}}
            ]
        }
    }
    answered = {
        "stages": {
            "nodeBootstrapped": [
                {
                    "name": "fmctl-verify",
                    "scriptSource": {"scriptLocation": "s3://b/k.sh", "s3VersionId": ""},
                    "arguments": [],
                    "onError": "TERMINATE",
                    "executionPolicy": "FIRST_BOOT_ONLY",
                }
            ],
            "nodeReady": [],
        },
        "scriptCachingPolicy": "CACHE_ONCE",
    }
    assert canonical_actions(asked) == canonical_actions(answered) != ""
    every_boot = {**asked["stages"]["nodeBootstrapped"][0], "executionPolicy": "EVERY_BOOT"}
    assert canonical_actions({"stages": {"nodeBootstrapped": [every_boot]}}) != canonical_actions(
        asked
    )
    assert canonical_actions(None) == canonical_actions({"stages": {}}) == ""
