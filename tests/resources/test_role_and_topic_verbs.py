"""The IAM role's and the SNS topic's create after a lost answer, and their deletes, against
recorded answers: a role whose CreateRole answer was lost is claimed by its tags and given
what the first try never got to (its policies, its instance profile); a topic's CreateTopic
is idempotent by name, attributes and tags; a role goes only after its profile, policies and
inline policy, and a role or topic already gone is deleted."""

from __future__ import annotations

import copy
import json

import pytest

from provisioner.graph.ref import Ref
from provisioner.resources.base import Owned, Request
from provisioner.resources.errors import Foreign
from provisioner.resources.iam import Role, RoleOut, RoleParams
from provisioner.resources.kms import KmsOut
from provisioner.resources.topics import Topic, TopicOut, TopicParams, access_policy
from tests.resources.contract import covers
from tests.resources.recorded import ACCOUNT, RecordedAws, lose_answer, tags
from tests.resources.test_lifecycle_verbs import CLUSTER, _ctx, _spec, _tags

ROLE = "fmctl-llm-us-east-1-eks-node"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/{ROLE}"
TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "ec2.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    },
    sort_keys=True,
)
INLINE = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}],
    },
    sort_keys=True,
)
MANAGED = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly")


def _role_params() -> RoleParams:
    return RoleParams(
        ROLE, TRUST, MANAGED, "fmctl", INLINE, True, "fmctl llm: nodes", _tags("iam/eks-node")
    )


def _role(name: str = ROLE) -> dict[str, object]:
    import datetime

    return {
        "Path": "/",
        "RoleName": name,
        "RoleId": "AROA0123456789EXAMPLE",
        "Arn": f"arn:aws:iam::{ACCOUNT}:role/{name}",
        "CreateDate": datetime.datetime(2026, 11, 30, tzinfo=datetime.UTC),
        "AssumeRolePolicyDocument": TRUST,
    }


def _profile(roles: list[dict[str, object]]) -> dict[str, object]:
    """The role's instance profile (same name, same path), holding ``roles``."""
    return {
        "Path": "/",
        "InstanceProfileName": ROLE,
        "InstanceProfileId": "AIPA0123456789EXAMPLE",
        "Arn": f"arn:aws:iam::{ACCOUNT}:instance-profile/{ROLE}",
        "CreateDate": _role()["CreateDate"],
        "Roles": roles,
    }


@covers("iam-role", "create-adopts")
def test_a_role_whose_create_answer_was_lost_is_claimed_and_given_what_it_lacks() -> None:
    aws = RecordedAws()
    request = {
        "RoleName": ROLE,
        "AssumeRolePolicyDocument": TRUST,
        "Description": "fmctl llm: nodes",
        "Tags": _spec("role", "iam/eks-node")[0]["Tags"],
        "MaxSessionDuration": 3600,
        "Path": "/",
    }
    lose_answer(aws, "iam", "CreateRole", {"Role": _role()}, request)
    req = Request(_ctx(aws), "iam/eks-node", _role_params())
    with pytest.raises(Exception, match="Connection was closed"):
        Role().create(req)
    # The next try: the name is taken, by this cluster's role (its tags say so).
    aws.fail("iam", "CreateRole", "EntityAlreadyExists", 409)
    aws.answer("iam", "ListRoleTags", {"Tags": tags(CLUSTER, "iam/eks-node", team="ml")})
    aws.answer("iam", "ListAttachedRolePolicies", {"AttachedPolicies": []}, {"RoleName": ROLE})
    for policy in sorted(MANAGED):
        arn = f"arn:aws:iam::aws:policy/{policy}"
        aws.answer("iam", "AttachRolePolicy", {}, {"RoleName": ROLE, "PolicyArn": arn})
    expected = {"RoleName": ROLE, "PolicyName": "fmctl", "PolicyDocument": INLINE}
    aws.answer("iam", "PutRolePolicy", {}, expected)
    aws.fail("iam", "GetInstanceProfile", "NoSuchEntity", 404)
    aws.answer("iam", "CreateInstanceProfile", {"InstanceProfile": _profile([])})
    aws.answer(
        "iam", "AddRoleToInstanceProfile", {}, {"InstanceProfileName": ROLE, "RoleName": ROLE}
    )
    aws.answer("iam", "GetRole", {"Role": _role()}, {"RoleName": ROLE})
    assert Role().create(req) == RoleOut(ROLE, ROLE_ARN)
    aws.done()
    # A role of the name that another cluster made is never taken over.
    theirs = RecordedAws()
    theirs.fail("iam", "CreateRole", "EntityAlreadyExists", 409)
    theirs.answer("iam", "ListRoleTags", {"Tags": tags("other", "iam/eks-node")})
    with pytest.raises(Foreign, match="not owned by fmctl cluster llm"):
        Role().create(Request(_ctx(theirs), "iam/eks-node", _role_params()))
    theirs.done()


@covers("iam-role", "delete")
def test_a_role_goes_after_its_profile_policies_and_inline_policy() -> None:
    owned = Owned("iam-role", "iam/eks-node", ROLE)
    aws = RecordedAws()
    profile = dict(_profile([_role()]), Tags=tags(CLUSTER, "iam/eks-node"))
    # (copies: botocore decodes the role's trust document in the answer it is given)
    aws.answer("iam", "GetInstanceProfile", {"InstanceProfile": copy.deepcopy(profile)})
    aws.answer("iam", "GetInstanceProfile", {"InstanceProfile": copy.deepcopy(profile)})
    aws.answer(
        "iam", "RemoveRoleFromInstanceProfile", {}, {"InstanceProfileName": ROLE, "RoleName": ROLE}
    )
    aws.answer("iam", "DeleteInstanceProfile", {}, {"InstanceProfileName": ROLE})
    # Another profile holding the role (a person's): the role comes out, the profile stays.
    theirs = dict(copy.deepcopy(profile), InstanceProfileName="ops-debug", Tags=[])
    aws.answer("iam", "ListInstanceProfilesForRole", {"InstanceProfiles": [theirs]})
    aws.answer(
        "iam",
        "RemoveRoleFromInstanceProfile",
        {},
        {"InstanceProfileName": "ops-debug", "RoleName": ROLE},
    )
    attached = [{"PolicyName": p, "PolicyArn": f"arn:aws:iam::aws:policy/{p}"} for p in MANAGED]
    aws.answer("iam", "ListAttachedRolePolicies", {"AttachedPolicies": attached})
    for policy in attached:
        aws.answer(
            "iam", "DetachRolePolicy", {}, {"RoleName": ROLE, "PolicyArn": policy["PolicyArn"]}
        )
    aws.answer("iam", "ListRolePolicies", {"PolicyNames": ["fmctl"]})
    aws.answer("iam", "DeleteRolePolicy", {}, {"RoleName": ROLE, "PolicyName": "fmctl"})
    aws.answer("iam", "DeleteRole", {}, {"RoleName": ROLE})
    Role().delete(_ctx(aws), owned)
    aws.done()
    gone = RecordedAws()
    gone.fail("iam", "GetInstanceProfile", "NoSuchEntity", 404)
    gone.fail("iam", "ListInstanceProfilesForRole", "NoSuchEntity", 404)
    Role().delete(_ctx(gone), owned)
    gone.done()


TOPIC = "fmctl-llm-budget"
TOPIC_ARN = f"arn:aws:sns:us-east-1:{ACCOUNT}:{TOPIC}"
KEY_ARN = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"


@covers("sns-topic", "create-adopts")
def test_a_topic_whose_create_answer_was_lost_is_the_same_topic_on_the_next_try() -> None:
    """CreateTopic is idempotent for the same name, attributes and tags (SNS API
    reference): the try after a lost answer finds the topic this cluster's and gets its
    ARN back; a topic of the name that is not this cluster's is refused first."""
    aws = RecordedAws()
    ctx = _ctx(aws)
    ctx.record("kms/budget", KmsOut("1234abcd-12ab-34cd-56ef-1234567890ab", KEY_ARN))
    params = TopicParams(
        TOPIC, "budgets.amazonaws.com", Ref("kms/budget", KmsOut), _tags("budget/topic")
    )
    request = {
        "Name": TOPIC,
        "Attributes": {
            "Policy": access_policy(TOPIC_ARN, ACCOUNT, "budgets.amazonaws.com"),
            "KmsMasterKeyId": KEY_ARN,
        },
        "Tags": _spec("topic", "budget/topic")[0]["Tags"],
    }
    aws.fail("sns", "GetTopicAttributes", "NotFound", 404, {"TopicArn": TOPIC_ARN})
    lose_answer(aws, "sns", "CreateTopic", {"TopicArn": TOPIC_ARN}, request)
    req = Request(ctx, "budget/topic", params)
    with pytest.raises(Exception, match="Connection was closed"):
        Topic().create(req)
    aws.answer("sns", "GetTopicAttributes", {"Attributes": {"TopicArn": TOPIC_ARN}})
    aws.answer("sns", "ListTagsForResource", {"Tags": tags(CLUSTER, "budget/topic", team="ml")})
    aws.answer("sns", "CreateTopic", {"TopicArn": TOPIC_ARN}, request)
    assert Topic().create(req) == TopicOut(TOPIC_ARN, TOPIC_ARN)
    aws.done()
    aws.answer("sns", "GetTopicAttributes", {"Attributes": {"TopicArn": TOPIC_ARN}})
    aws.answer("sns", "ListTagsForResource", {"Tags": tags("other", "budget/topic")})
    with pytest.raises(Foreign, match="is not fmctl cluster llm's"):
        Topic().create(req)
    aws.done()


@covers("sns-topic", "delete")
def test_a_topic_is_deleted_and_one_already_gone_is_deleted() -> None:
    owned = Owned("sns-topic", "budget/topic", TOPIC_ARN)
    aws = RecordedAws()
    aws.answer("sns", "DeleteTopic", {}, {"TopicArn": TOPIC_ARN})
    Topic().delete(_ctx(aws), owned)
    aws.fail("sns", "DeleteTopic", "NotFound", 404)
    Topic().delete(_ctx(aws), owned)
    aws.fail("sns", "DeleteTopic", "AuthorizationError", 403)
    with pytest.raises(Exception, match="AuthorizationError"):
        Topic().delete(_ctx(aws), owned)
    aws.done()
