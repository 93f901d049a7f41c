"""The EKS control plane's and a managed add-on's create after a lost answer, and their
deletes, against recorded EKS answers: CreateCluster and CreateAddon carry a client request
token that is the same on every try (EKS answers a retry with what it is making); a name
already in use by this cluster's own (a re-run after a crash) is waited for, not made again,
and one that is not this cluster's is refused; a delete waits until EKS no longer knows it,
and one already gone is deleted."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from botocore.exceptions import ClientError

from provisioner.graph.ref import After, Ref
from provisioner.resources.base import Owned, Request
from provisioner.resources.compute import SgOut
from provisioner.resources.context import Context
from provisioner.resources.eks import EksCluster, EksOut
from provisioner.resources.eks_addons import Addon, AddonOut, AddonParams
from provisioner.resources.eks_nodegroup_model import NodegroupOut
from provisioner.resources.eks_nodes import Nodegroup
from provisioner.resources.errors import Foreign, ResourceError
from provisioner.resources.iam import RoleOut
from provisioner.resources.kms import KmsOut
from provisioner.resources.network import SubnetOut
from tests.resources.contract import covers
from tests.resources.recorded import ACCOUNT, RecordedAws, example
from tests.resources.test_lifecycle_verbs import Stamp
from tests.resources.test_read_diff import _eks_params, _ng_params, _nodegroup, _tags

CLUSTER = "devel"  # the name in AWS's published DescribeCluster example
KEY = f"arn:aws:kms:us-west-2:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/fmctl-devel-us-west-2-eks-cluster"


def _ctx(aws: RecordedAws) -> Context:
    ctx = Context(aws=aws, cluster=CLUSTER, region="us-west-2", time_scale=0.001)  # type: ignore[arg-type]
    ctx.record("iam/eks-cluster", RoleOut("fmctl-devel-us-west-2-eks-cluster", ROLE))
    ctx.record("subnet/private", SubnetOut("subnet-9d4a7b6c", "us-west-2a"))
    ctx.record("sg/efa", SgOut("sg-903004f8"))
    ctx.record("kms/secrets", KmsOut("1234abcd-12ab-34cd-56ef-1234567890ab", KEY))
    return ctx


def _cluster(status: str, owner: str | None = CLUSTER) -> dict[str, Any]:
    """AWS's published DescribeCluster answer, in ``status``, tagged as ``owner``'s."""
    found = example("eks", "DescribeCluster")
    found["cluster"]["status"] = status
    found["cluster"]["tags"] = (
        {"fmctl.dev/cluster": owner, "fmctl.dev/resource": "eks"} if owner else {}
    )
    return found


def _create_request(ctx: Context) -> dict[str, Any]:
    return {
        "name": "devel",
        "version": "1.33",
        "roleArn": ROLE,
        "resourcesVpcConfig": {
            "subnetIds": ["subnet-9d4a7b6c"],
            "securityGroupIds": ["sg-903004f8"],
            "endpointPrivateAccess": True,
            "endpointPublicAccess": False,
        },
        "accessConfig": {
            "authenticationMode": "API",
            "bootstrapClusterCreatorAdminPermissions": True,
        },
        "logging": {"clusterLogging": [{"types": ["api"], "enabled": True}]},
        "encryptionConfig": [{"resources": ["secrets"], "provider": {"keyArn": KEY}}],
        "upgradePolicy": {"supportType": "STANDARD"},
        "tags": _tags("eks").at_creation() | {"fmctl.dev/created-at": Stamp()},
        "clientRequestToken": ctx.token("eks"),
    }


@covers("eks-cluster", "create-adopts")
def test_the_control_planes_create_carries_one_token_and_waits_for_what_eks_makes() -> None:
    tokens = []
    for _run in range(2):  # the first try, and botocore's retry after a lost answer
        aws = RecordedAws("us-west-2")
        ctx = _ctx(aws)
        request = _create_request(ctx)
        tokens.append(request["clientRequestToken"])
        aws.answer("eks", "CreateCluster", _cluster("CREATING"), request)
        aws.answer("eks", "DescribeCluster", _cluster("CREATING"), {"name": CLUSTER})
        aws.answer("eks", "DescribeCluster", _cluster("ACTIVE"), {"name": CLUSTER})
        out = EksCluster().create(Request(ctx, "eks", _eks_params("1.33")))
        assert out == EksCluster.out_of(_cluster("ACTIVE")["cluster"])
        aws.done()
    assert tokens[0] == tokens[1]


@covers("eks-cluster", "create-adopts")
def test_a_control_plane_already_made_by_this_cluster_is_waited_for_and_a_strangers_refused() -> (
    None
):
    # A re-run after a crash: EKS says the name is in use; it is this cluster's (tagged).
    aws = RecordedAws("us-west-2")
    aws.fail("eks", "CreateCluster", "ResourceInUseException", 409)
    aws.answer("eks", "DescribeCluster", _cluster("CREATING"))  # the look
    aws.answer("eks", "DescribeCluster", _cluster("ACTIVE"))  # the wait
    out = EksCluster().create(Request(_ctx(aws), "eks", _eks_params("1.33")))
    assert out.id == CLUSTER
    aws.done()
    theirs = RecordedAws("us-west-2")
    theirs.fail("eks", "CreateCluster", "ResourceInUseException", 409)
    theirs.answer("eks", "DescribeCluster", _cluster("ACTIVE", owner=None))
    with pytest.raises(Foreign, match="not fmctl's"):
        EksCluster().create(Request(_ctx(theirs), "eks", _eks_params("1.33")))
    theirs.done()


@covers("eks-cluster", "delete")
def test_a_control_plane_delete_waits_until_eks_no_longer_knows_it() -> None:
    owned = Owned("eks-cluster", "eks", CLUSTER)
    aws = RecordedAws("us-west-2")
    aws.answer("eks", "DeleteCluster", _cluster("DELETING"), {"name": CLUSTER})
    aws.answer("eks", "DescribeCluster", _cluster("DELETING"))
    aws.fail("eks", "DescribeCluster", "ResourceNotFoundException", 404)
    EksCluster().delete(_ctx(aws), owned)
    aws.fail("eks", "DeleteCluster", "ResourceNotFoundException", 404)
    EksCluster().delete(_ctx(aws), owned)
    aws.done()


def _addon_params(version: str | None = "v1.34.1-eksbuild.3") -> AddonParams:
    return AddonParams(
        Ref("eks", EksOut),
        "kube-proxy",
        "1.34",
        After("nodegroup/system", NodegroupOut),
        _tags("addon/kube-proxy"),
        version=version,
    )


def _addon(
    status: str, version: str = "v1.34.1-eksbuild.3", owner: str | None = CLUSTER
) -> dict[str, Any]:
    tags = {"fmctl.dev/cluster": owner, "fmctl.dev/resource": "addon/kube-proxy"}
    return {
        "addon": {
            "addonName": "kube-proxy",
            "clusterName": CLUSTER,
            "status": status,
            "addonVersion": version,
            "health": {"issues": []},
            "tags": tags if owner else {},
        }
    }


@covers("eks-addon", "create-adopts")
def test_an_addons_create_carries_one_token_and_one_in_use_is_waited_for() -> None:
    tokens = []
    for _run in range(2):
        aws = RecordedAws("us-west-2")
        ctx = _ctx(aws)
        tokens.append(ctx.token("addon/kube-proxy"))
        request = {
            "clusterName": CLUSTER,
            "addonName": "kube-proxy",
            "addonVersion": "v1.34.1-eksbuild.3",
            "resolveConflicts": "OVERWRITE",
            "tags": _tags("addon/kube-proxy").at_creation() | {"fmctl.dev/created-at": Stamp()},
            "clientRequestToken": tokens[-1],
        }
        aws.answer("eks", "CreateAddon", _addon("CREATING"), request)
        aws.answer("eks", "DescribeAddon", _addon("CREATING"))
        aws.answer("eks", "DescribeAddon", _addon("ACTIVE"))
        assert Addon().create(Request(ctx, "addon/kube-proxy", _addon_params())) == AddonOut(
            "kube-proxy", "v1.34.1-eksbuild.3"
        )
        aws.done()
    assert tokens[0] == tokens[1]
    # A re-run after a crash: in use already, so waited for; a failed one says why.
    aws = RecordedAws("us-west-2")
    aws.fail("eks", "CreateAddon", "ResourceInUseException", 409)
    broken = copy.deepcopy(_addon("CREATE_FAILED"))
    broken["addon"]["health"]["issues"] = [
        {"code": "InsufficientNumberOfReplicas", "message": "no nodes"}
    ]
    aws.answer("eks", "DescribeAddon", broken)  # whose it is
    aws.answer("eks", "DescribeAddon", broken)  # the wait
    with pytest.raises(ResourceError, match="CREATE_FAILED: InsufficientNumberOfReplicas"):
        Addon().create(Request(_ctx(aws), "addon/kube-proxy", _addon_params()))
    aws.done()
    # In use by an add-on someone else added to fmctl's cluster: not taken over.
    theirs = RecordedAws("us-west-2")
    theirs.fail("eks", "CreateAddon", "ResourceInUseException", 409)
    theirs.answer("eks", "DescribeAddon", _addon("ACTIVE", owner=None))
    with pytest.raises(Foreign, match=r"kube-proxy of cluster .* was not made by fmctl"):
        Addon().create(Request(_ctx(theirs), "addon/kube-proxy", _addon_params()))
    theirs.done()


@covers("eks-addon", "delete")
def test_an_addon_delete_waits_until_eks_no_longer_knows_it() -> None:
    owned = Owned("eks-addon", "addon/kube-proxy", "kube-proxy")
    aws = RecordedAws("us-west-2")
    expected = {"clusterName": CLUSTER, "addonName": "kube-proxy"}
    aws.answer("eks", "DeleteAddon", _addon("DELETING"), expected)
    aws.answer("eks", "DescribeAddon", _addon("DELETING"))
    aws.fail("eks", "DescribeAddon", "ResourceNotFoundException", 404)
    Addon().delete(_ctx(aws), owned)
    aws.fail("eks", "DeleteAddon", "ResourceNotFoundException", 404)
    Addon().delete(_ctx(aws), owned)
    aws.fail("eks", "DeleteAddon", "AccessDeniedException", 403)
    with pytest.raises(ClientError):
        Addon().delete(_ctx(aws), owned)
    aws.done()


def _ng_ctx(aws: RecordedAws) -> Context:
    ctx = Context(aws=aws, cluster="llm", region="us-west-2", time_scale=0.001)  # type: ignore[arg-type]
    ctx.record("subnet/private", SubnetOut("subnet-9d4a7b6c", "us-west-2a"))
    ctx.record("iam/eks-node", RoleOut("node", f"arn:aws:iam::{ACCOUNT}:role/node"))
    return ctx


@covers("eks-nodegroup", "create-adopts")
def test_a_node_groups_create_carries_one_token_and_one_of_this_clusters_in_use_is_waited_for() -> (
    None
):
    tokens = []
    for _run in range(2):
        aws = RecordedAws("us-west-2")
        ctx = _ng_ctx(aws)
        tokens.append(ctx.token("nodegroup/gpu"))
        request = {
            "clusterName": "llm",
            "nodegroupName": "gpu",
            "amiType": "AL2023_x86_64_NVIDIA",
            "capacityType": "ON_DEMAND",
            "scalingConfig": {"minSize": 2, "maxSize": 2, "desiredSize": 2},
            "subnets": ["subnet-9d4a7b6c"],
            "nodeRole": f"arn:aws:iam::{ACCOUNT}:role/node",
            "labels": {"fmctl.dev/pool": "gpu"},
            "updateConfig": {"maxUnavailable": 1},
            "nodeRepairConfig": _ng_params(2, "p5en.48xlarge").repair.request(),
            "version": "1.33",
            "tags": _tags("nodegroup/gpu").at_creation() | {"fmctl.dev/created-at": Stamp()},
            "instanceTypes": ["p5en.48xlarge"],
            "clientRequestToken": tokens[-1],
        }
        aws.answer("eks", "CreateNodegroup", _nodegroup(status="CREATING"), request)
        aws.answer("eks", "DescribeNodegroup", _nodegroup(status="CREATING"))
        aws.answer("eks", "DescribeNodegroup", _nodegroup())
        made = Nodegroup().create(Request(ctx, "nodegroup/gpu", _ng_params(2, "p5en.48xlarge")))
        assert made == NodegroupOut("gpu")
        aws.done()
    assert tokens[0] == tokens[1]
    # In use by this cluster's node group (a re-run after a crash): waited for, not made again.
    aws = RecordedAws("us-west-2")
    aws.fail("eks", "CreateNodegroup", "ResourceInUseException", 409)
    aws.answer("eks", "DescribeNodegroup", _nodegroup(status="CREATING"))
    aws.answer("eks", "DescribeNodegroup", _nodegroup())
    assert Nodegroup().create(
        Request(_ng_ctx(aws), "nodegroup/gpu", _ng_params(2, "p5en.48xlarge"))
    ) == NodegroupOut("gpu")
    aws.done()
    # In use by a node group someone else made: the conflict stands.
    theirs = RecordedAws("us-west-2")
    theirs.fail("eks", "CreateNodegroup", "ResourceInUseException", 409)
    theirs.answer("eks", "DescribeNodegroup", _nodegroup(tags={}))
    with pytest.raises(ClientError, match="ResourceInUseException"):
        Nodegroup().create(
            Request(_ng_ctx(theirs), "nodegroup/gpu", _ng_params(2, "p5en.48xlarge"))
        )
    theirs.done()


@covers("eks-nodegroup", "delete")
def test_a_node_group_delete_waits_until_eks_no_longer_knows_it() -> None:
    owned = Owned("eks-nodegroup", "nodegroup/gpu", "gpu")
    aws = RecordedAws("us-west-2")
    expected = {"clusterName": "llm", "nodegroupName": "gpu"}
    aws.answer("eks", "DeleteNodegroup", _nodegroup(status="DELETING"), expected)
    aws.answer("eks", "DescribeNodegroup", _nodegroup(status="DELETING"))
    aws.fail("eks", "DescribeNodegroup", "ResourceNotFoundException", 404)
    Nodegroup().delete(_ng_ctx(aws), owned)
    aws.fail("eks", "DeleteNodegroup", "ResourceNotFoundException", 404)
    Nodegroup().delete(_ng_ctx(aws), owned)
    aws.done()


def test_an_addon_someone_else_added_is_not_read_as_fmctls() -> None:
    """On fmctl's own cluster, an add-on of the spec's name that carries no owner tag (added
    by hand, the console or eksctl) is refused, not taken over and re-versioned."""
    aws = RecordedAws("us-west-2")
    aws.answer("eks", "DescribeCluster", _cluster("ACTIVE"))
    aws.answer("eks", "ListAddons", {"addons": ["kube-proxy"]})
    aws.answer("eks", "DescribeAddon", _addon("ACTIVE", owner=None))
    with pytest.raises(Foreign, match="was not made by fmctl"):
        Addon().read(Request(_ctx(aws), "addon/kube-proxy", _addon_params()))
    aws.done()
