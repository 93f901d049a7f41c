"""EKS access entries and Pod Identity associations against recorded EKS answers: read
through the cluster (only when the control plane is this cluster's), diff, a create whose
answer was lost or that meets the entry in use (the cluster creator's, made by EKS), and a
delete that counts one already gone as deleted."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from provisioner.graph.ref import Ref
from provisioner.resources.base import How, Owned, Request
from provisioner.resources.context import Context
from provisioner.resources.eks import EksOut
from provisioner.resources.eks_access import ADMIN_POLICY, AccessEntry, AccessOut, AccessParams
from provisioner.resources.eks_addons import AddonOut, IdentityOut, IdentityParams, PodIdentity
from provisioner.resources.errors import Foreign
from provisioner.resources.iam import RoleOut
from tests.resources.contract import covers
from tests.resources.recorded import ACCOUNT, RecordedAws, example, lose_answer
from tests.resources.test_lifecycle_verbs import Stamp
from tests.resources.test_read_diff import _tags

CLUSTER = "llm"
NODE_ROLE = f"arn:aws:iam::{ACCOUNT}:role/fmctl-llm-us-west-2-eks-node"
AMP_ROLE = f"arn:aws:iam::{ACCOUNT}:role/fmctl-llm-us-west-2-amp-writer"
ARN_HEAD = f"arn:aws:eks:us-west-2:{ACCOUNT}"


def _ctx(aws: RecordedAws) -> Context:
    ctx = Context(aws=aws, cluster=CLUSTER, region="us-west-2", time_scale=0.001)  # type: ignore[arg-type]
    ctx.record("iam/eks-node", RoleOut("fmctl-llm-us-west-2-eks-node", NODE_ROLE))
    ctx.record("iam/amp-writer", RoleOut("fmctl-llm-us-west-2-amp-writer", AMP_ROLE))
    ctx.record("addon/eks-pod-identity-agent", AddonOut("eks-pod-identity-agent", "v1.3.8"))
    return ctx


def _ours(aws: RecordedAws) -> None:
    """The control plane, tagged as the cluster's (its parts are read only through it)."""
    cluster = example("eks", "DescribeCluster")
    cluster["cluster"]["name"] = CLUSTER
    cluster["cluster"]["tags"] = {"fmctl.dev/cluster": CLUSTER, "fmctl.dev/resource": "eks"}
    aws.answer("eks", "DescribeCluster", cluster, {"name": CLUSTER})


def _entry(principal: str, kind: str, tagged: bool = True) -> dict[str, Any]:
    tags = {"fmctl.dev/cluster": CLUSTER, "fmctl.dev/resource": "access/nodes", "team": "ml"}
    return {
        "accessEntry": {
            "clusterName": CLUSTER,
            "principalArn": principal,
            "accessEntryArn": f"arn:aws:eks:us-west-2:{ACCOUNT}:access-entry/{CLUSTER}/role/x",
            "type": kind,
            "tags": tags if tagged else {},
        }
    }


def _node_access(policy: str | None = None) -> AccessParams:
    return AccessParams(
        Ref("eks", EksOut), Ref("iam/eks-node", RoleOut), "EC2_LINUX", _tags("access/nodes"), policy
    )


@covers("eks-access-entry", "read", "diff")
def test_the_node_roles_access_entry_is_read_through_the_cluster_and_its_policy_in_place() -> None:
    aws = RecordedAws("us-west-2")
    _ours(aws)
    admin = f"arn:aws:iam::{ACCOUNT}:role/Admin"
    aws.answer("eks", "ListAccessEntries", {"accessEntries": [admin, NODE_ROLE]})
    aws.answer("eks", "DescribeAccessEntry", _entry(admin, "STANDARD", tagged=False))
    aws.answer("eks", "DescribeAccessEntry", _entry(NODE_ROLE, "EC2_LINUX"))
    aws.answer(
        "eks",
        "ListAssociatedAccessPolicies",
        {"clusterName": CLUSTER, "principalArn": NODE_ROLE, "associatedAccessPolicies": []},
        {"clusterName": CLUSTER, "principalArn": NODE_ROLE},
    )
    ctx = _ctx(aws)
    req = Request(ctx, "access/nodes", _node_access())
    observed = AccessEntry().read(req)
    aws.done()
    assert observed is not None and observed.outputs == AccessOut(NODE_ROLE)
    assert AccessEntry().diff(req, observed) == []
    admin_too = Request(ctx, "access/nodes", _node_access(ADMIN_POLICY))
    (change,) = AccessEntry().diff(admin_too, observed)
    assert (change.path, change.after, change.how) == (
        "policies",
        frozenset({ADMIN_POLICY}),
        How.UPDATE,
    )
    standard = Request(
        ctx, "access/nodes", dataclasses.replace(_node_access(), entry_type="STANDARD")
    )
    assert {c.path: c.how for c in AccessEntry().diff(standard, observed)} == {
        "entry_type": How.REPLACE
    }
    # A control plane that is not this cluster's: nothing of it is read.
    theirs = RecordedAws("us-west-2")
    theirs.fail("eks", "DescribeCluster", "ResourceNotFoundException", 404)
    assert AccessEntry().read(Request(_ctx(theirs), "access/nodes", _node_access())) is None
    theirs.done()


@covers("eks-access-entry", "create-adopts")
def test_an_access_entry_whose_answer_was_lost_or_in_use_gets_its_policy_all_the_same() -> None:
    aws = RecordedAws("us-west-2")
    ctx = _ctx(aws)
    request = {
        "clusterName": CLUSTER,
        "principalArn": NODE_ROLE,
        "type": "EC2_LINUX",
        "tags": _tags("access/nodes").at_creation() | {"fmctl.dev/created-at": Stamp()},
        "clientRequestToken": ctx.token(f"access/nodes/{NODE_ROLE}"),
    }
    lose_answer(aws, "eks", "CreateAccessEntry", _entry(NODE_ROLE, "EC2_LINUX"), request)
    req = Request(ctx, "access/nodes", _node_access(ADMIN_POLICY))
    with pytest.raises(Exception, match="Connection was closed"):
        AccessEntry().create(req)
    # The retry carries the same token; had the entry come from elsewhere (the cluster
    # creator's, made by EKS), EKS answers ResourceInUseException: either way the policy.
    aws.fail("eks", "CreateAccessEntry", "ResourceInUseException", 409, request)
    association = {
        "clusterName": CLUSTER,
        "principalArn": NODE_ROLE,
        "policyArn": ADMIN_POLICY,
        "accessScope": {"type": "cluster"},
    }
    aws.answer("eks", "AssociateAccessPolicy", {"clusterName": CLUSTER}, association)
    assert AccessEntry().create(req) == AccessOut(NODE_ROLE)
    aws.done()


@covers("eks-access-entry", "delete")
def test_an_access_entry_is_deleted_and_one_already_gone_is_deleted() -> None:
    owned = Owned("eks-access-entry", "access/nodes", NODE_ROLE)
    aws = RecordedAws("us-west-2")
    aws.answer("eks", "DeleteAccessEntry", {}, {"clusterName": CLUSTER, "principalArn": NODE_ROLE})
    AccessEntry().delete(_ctx(aws), owned)
    aws.fail("eks", "DeleteAccessEntry", "ResourceNotFoundException", 404)
    AccessEntry().delete(_ctx(aws), owned)
    aws.done()


def _identity_params() -> IdentityParams:
    return IdentityParams(
        Ref("eks", EksOut),
        "monitoring",
        "prometheus",
        Ref("iam/amp-writer", RoleOut),
        Ref("addon/eks-pod-identity-agent", AddonOut),
        _tags("identity/prometheus"),
    )


def _association(
    aid: str, account: str = "prometheus", owner: str | None = CLUSTER
) -> dict[str, Any]:
    tags = {"fmctl.dev/cluster": owner, "fmctl.dev/resource": "identity/prometheus", "team": "ml"}
    return {
        "association": {
            "clusterName": CLUSTER,
            "namespace": "monitoring",
            "serviceAccount": account,
            "roleArn": AMP_ROLE,
            "associationArn": f"{ARN_HEAD}:podidentityassociation/{CLUSTER}/{aid}",
            "associationId": aid,
            "tags": tags if owner else {},
        }
    }


def _listed(aws: RecordedAws, *found: dict[str, Any]) -> None:
    _ours(aws)
    summaries = [
        {
            k: a["association"][k]
            for k in ("clusterName", "namespace", "serviceAccount", "associationId")
        }
        for a in found
    ]
    aws.answer("eks", "ListPodIdentityAssociations", {"associations": summaries})
    for item in found:
        aws.answer("eks", "DescribePodIdentityAssociation", item)


@covers("eks-pod-identity", "read", "diff")
def test_a_pod_identity_is_read_by_its_service_account_and_a_new_role_in_place() -> None:
    aws = RecordedAws("us-west-2")
    _listed(aws, _association("a-grafana", "grafana"), _association("a-prometheus"))
    ctx = _ctx(aws)
    req = Request(ctx, "identity/prometheus", _identity_params())
    observed = PodIdentity().read(req)
    aws.done()
    assert observed is not None and observed.outputs == IdentityOut("a-prometheus")
    assert PodIdentity().diff(req, observed) == []
    ctx.record("iam/amp-writer", RoleOut("other", f"arn:aws:iam::{ACCOUNT}:role/other"))
    (change,) = PodIdentity().diff(req, observed)
    assert (change.path, change.how) == ("role", How.UPDATE)
    # Someone else's association for the service account is never taken over.
    theirs = RecordedAws("us-west-2")
    _listed(theirs, _association("a-theirs", owner=None))
    with pytest.raises(Foreign, match="fmctl did not make"):
        PodIdentity().read(Request(_ctx(theirs), "identity/prometheus", _identity_params()))


@covers("eks-pod-identity", "create-adopts")
def test_a_pod_identity_in_use_after_a_lost_answer_is_found_and_kept() -> None:
    aws = RecordedAws("us-west-2")
    ctx = _ctx(aws)
    aws.fail("eks", "CreatePodIdentityAssociation", "ResourceInUseException", 409)
    _listed(aws, _association("a-prometheus"))
    out = PodIdentity().create(Request(ctx, "identity/prometheus", _identity_params()))
    assert out == IdentityOut("a-prometheus")
    aws.done()


@covers("eks-pod-identity", "delete")
def test_a_pod_identity_is_deleted_and_one_already_gone_is_deleted() -> None:
    owned = Owned("eks-pod-identity", "identity/prometheus", "a-prometheus")
    aws = RecordedAws("us-west-2")
    expected = {"clusterName": CLUSTER, "associationId": "a-prometheus"}
    aws.answer("eks", "DeletePodIdentityAssociation", _association("a-prometheus"), expected)
    PodIdentity().delete(_ctx(aws), owned)
    aws.fail("eks", "DeletePodIdentityAssociation", "ResourceNotFoundException", 404)
    PodIdentity().delete(_ctx(aws), owned)
    aws.done()
