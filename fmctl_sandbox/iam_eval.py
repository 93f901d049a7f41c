"""A role's policies judged as the sandbox can judge them, for what runs in it as a role:
EventBridge Scheduler's targets (``scheduler_run``), Lambda functions (``lambda_run``), the
Cluster Autoscaler's stand-in (``eks_autoscaler``) and the programs it runs in its clusters
with EKS Pod Identity credentials (``pod_identity``: fmctl's verify controller).

The role must exist and trust the service that assumes it: a trust statement's conditions
are judged on the context keys the service passes, ``aws:SourceAccount`` (the account) and
``aws:SourceArn`` (Scheduler: the schedule group; EventBridge: the rule; the services'
"Confused deputy prevention" pages), with ``StringEquals``, ``StringLike``, ``ArnEquals``
and ``ArnLike``; a key the service does not pass, or another condition, fails the statement.
Its inline and attached managed policies are read from moto's IAM. Only Allow statements
are evaluated (an explicit Deny and permission boundaries are not), against every resource
ARN AWS's Service Authorization Reference gives for the call: each must be allowed. Of a
policy's conditions, only ``StringEquals`` on ``ssm:resourceTag/KEY`` (SendCommand's,
against the instance's tags) and ``autoscaling:ResourceTag/KEY`` (the Cluster Autoscaler's
writes and the verify controller's, against the Auto Scaling group's tags) is judged; a
statement with any other condition allows nothing here. The principals are those services'
and EKS Pod Identity's (``pods.eks.amazonaws.com``, for the autoscaler's and the verify
controller's pods). A call the sandbox has no ARN for is refused, so what it cannot judge
fails rather than passing unchecked.
"""

from __future__ import annotations

import fnmatch
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

if TYPE_CHECKING:
    from fmctl_sandbox.ssm_agent import Others


def resource(
    service: str, action: str, region: str, account: str, params: dict[str, Any]
) -> str | None:
    """The ARN a call acts on (``action`` as ``apiAction``), for the calls fmctl's stop
    schedules and function make."""
    if (service, action) == ("eks", "updateNodegroupConfig"):
        # nodegroup/CLUSTER/NODEGROUP/UUID: the uuid is EKS's; a policy names it or `*`.
        uuid = "00000000-0000-0000-0000-000000000000"
        cluster, group = params.get("clusterName"), params.get("nodegroupName")
        return f"arn:aws:eks:{region}:{account}:nodegroup/{cluster}/{group}/{uuid}"
    if (service, action) == ("pcs", "updateComputeNodeGroup"):
        cluster, group = params.get("clusterIdentifier"), params.get("computeNodeGroupIdentifier")
        return f"arn:aws:pcs:{region}:{account}:computenodegroup/{cluster}/{group}"
    if (service, action) == ("dynamodb", "updateItem"):
        return f"arn:aws:dynamodb:{region}:{account}:table/{params.get('TableName')}"
    return None


#: A resource a call acts on, and the tags its condition keys read.
Resource = tuple[str, dict[str, str]]


def resources(
    service: str,
    action: str,
    region: str,
    account: str,
    params: dict[str, Any],
    others: Others | None = None,
) -> list[Resource] | None:
    """Every resource a call acts on (SendCommand: its document and each instance, with
    the instance's tags: moto's, or those of ``others``, the instances moto does not hold),
    or None when the sandbox does not judge the call."""
    if (service, action) == ("ssm", "sendCommand"):
        from moto.ec2.models import ec2_backends

        ec2 = ec2_backends[account][region]
        found: list[Resource] = [
            (f"arn:aws:ssm:{region}::document/{params.get('DocumentName')}", {})
        ]
        from fmctl_sandbox.ssm_agent import targeted

        for instance in targeted(ec2, params, others):
            if others and instance in others:
                tags = dict(others[instance])
            else:
                tags = {
                    t["key"]: t["value"] for t in ec2.describe_tags({"resource-id": [instance]})
                }
            found.append((f"arn:aws:ec2:{region}:{account}:instance/{instance}", tags))
        return found
    if (service, action) in AUTOSCALING_WRITES:
        # An Auto Scaling group, with its tags (autoscaling:ResourceTag/KEY): the Service
        # Authorization Reference's autoScalingGroup ARN, whose group id a policy names or
        # matches with `*`.
        group = f"autoScalingGroupName/{params.get('AutoScalingGroupName')}"
        where = f"arn:aws:autoscaling:{region}:{account}:autoScalingGroup:*:{group}"
        return [(where, dict(params.get("_tags") or {}))]
    if (service, action) in UNSCOPED:
        return [("*", {})]  # no resource-level permission: a statement must name "*"
    arn = resource(service, action, region, account, params)
    return None if arn is None else [(arn, {})]


#: The Cluster Autoscaler's calls that act on an Auto Scaling group.
AUTOSCALING_WRITES = {
    ("autoscaling", "setDesiredCapacity"),
    ("autoscaling", "terminateInstanceInAutoScalingGroup"),
}
#: Calls with no resource-level permission (the Auto Scaling User Guide: "Describe actions
#: do not support resource-level permissions").
UNSCOPED = {
    ("autoscaling", "describeAutoScalingGroups"),
    ("autoscaling", "describeAutoScalingInstances"),
}


def role_documents(
    account: str,
    role_arn: str,
    principal: str,
    source_arn: str | None = None,
    session_tags: dict[str, str] | None = None,
) -> list[Any] | str:
    """The role's policy documents, or why it cannot be used by ``principal`` acting for
    ``source_arn`` with ``session_tags`` (what EKS Pod Identity tags its session with:
    ``aws:RequestTag/KEY`` in the trust); missing, or not trusting it. Call under the lock
    over AWS's state."""
    from moto.iam.models import iam_backends

    iam = iam_backends[account]["global"]
    name = role_arn.rsplit("/", 1)[-1]
    role = next((r for r in iam.roles.values() if r.name == name), None)
    if role is None:
        return f"no role {role_arn}"
    trust = json.loads(unquote(role.assume_role_policy_document))
    statements = listed(trust.get("Statement"))
    if not any(trusts(s, principal, account, source_arn, session_tags) for s in statements):
        return f"role {name} does not trust {principal}" + (
            f" for {source_arn}" if source_arn else ""
        )
    documents = [json.loads(unquote(d)) for d in role.policies.values()]
    for policy in role.managed_policies.values():
        current = [v for v in policy.versions if v.is_default]
        documents += [json.loads(unquote(v.document)) for v in current]
    return documents


def refused(
    documents: list[Any],
    role: str,
    service: str,
    action: str,
    region: str,
    account: str,
    params: dict[str, Any],
    others: Others | None = None,
) -> str | None:
    """Why the policies do not allow the call, or None when they do (``others``: instances
    moto does not hold, with their tags)."""
    acted_on = resources(service, action, region, account, params, others)
    if acted_on is None:
        return f"the sandbox does not judge {service}:{action}"
    wanted = f"{service}:{action}".lower()
    for arn, tags in acted_on:
        if not any(
            _allows(statement, wanted, arn, tags)
            for document in documents
            for statement in listed(document.get("Statement"))
        ):
            return f"role {role} is not allowed {service}:{action} on {arn}"
    return None


def _allows(statement: dict[str, Any], wanted: str, arn: str, tags: dict[str, str]) -> bool:
    if statement.get("Effect") != "Allow":
        return False
    actions = [a.lower() for a in listed(statement.get("Action"))]
    if not any(fnmatch.fnmatchcase(wanted, a) for a in actions):
        return False
    if not any(fnmatch.fnmatchcase(arn, r) for r in listed(statement.get("Resource"))):
        return False
    for operator, keys in (statement.get("Condition") or {}).items():
        if operator != "StringEquals":
            return False
        for key, values in keys.items():
            if not key.lower().startswith(("ssm:resourcetag/", "autoscaling:resourcetag/")):
                return False
            if tags.get(key.split("/", 1)[1]) not in listed(values):
                return False
    return True


#: Trust conditions the sandbox judges: exact or wildcard matches (case-sensitive values).
_MATCHES = {
    "StringEquals": lambda value, wanted: value == wanted,
    "ArnEquals": lambda value, wanted: value == wanted,
    "StringLike": fnmatch.fnmatchcase,
    "ArnLike": fnmatch.fnmatchcase,
}


def trusts(
    statement: dict[str, Any],
    principal: str,
    account: str,
    source_arn: str | None,
    session_tags: dict[str, str] | None = None,
) -> bool:
    """Whether a trust statement lets ``principal`` assume the role for ``source_arn`` in
    ``account``, tagging the session with ``session_tags`` (which needs sts:TagSession
    too: the IAM User Guide, "Passing session tags in AWS STS")."""
    context: dict[str, str | None] = {"aws:sourceaccount": account, "aws:sourcearn": source_arn}
    context |= {f"aws:requesttag/{k}".lower(): v for k, v in (session_tags or {}).items()}
    granted = statement.get("Principal", {})
    services = listed(granted.get("Service")) if isinstance(granted, dict) else []
    actions = listed(statement.get("Action"))
    if not (
        statement.get("Effect") == "Allow" and principal in services and "sts:AssumeRole" in actions
    ):
        return False
    if session_tags and "sts:TagSession" not in actions:
        return False
    for operator, keys in (statement.get("Condition") or {}).items():
        match = _MATCHES.get(operator)
        if match is None:
            return False
        for key, values in keys.items():
            value = context.get(key.lower())  # condition keys are not case-sensitive
            if value is None or not any(match(value, str(v)) for v in listed(values)):
                return False
    return True


def listed(value: Any) -> list[Any]:
    """A policy element as a list (one value or many)."""
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]
