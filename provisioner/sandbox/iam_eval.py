"""A role's policies judged as the sandbox can judge them, for what runs in it as a role:
EventBridge Scheduler's targets (``scheduler_run``) and Lambda functions (``lambda_run``).

The role must exist and trust the service that assumes it; its inline and attached managed
policies are read from moto's IAM. Only Allow statements are evaluated (an explicit Deny,
conditions and permission boundaries are not), against the resource ARN AWS's Service
Authorization Reference gives for the call. A call the sandbox has no ARN for is refused, so
what it cannot judge fails rather than passing unchecked.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Any
from urllib.parse import unquote


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


def role_documents(account: str, role_arn: str, principal: str) -> list[Any] | str:
    """The role's policy documents, or why it cannot be used by ``principal`` (missing, or
    not trusting it). Call under the lock over AWS's state."""
    from moto.iam.models import iam_backends

    iam = iam_backends[account]["global"]
    name = role_arn.rsplit("/", 1)[-1]
    role = next((r for r in iam.roles.values() if r.name == name), None)
    if role is None:
        return f"no role {role_arn}"
    trust = json.loads(unquote(role.assume_role_policy_document))
    if not any(_trusts(s, principal) for s in listed(trust.get("Statement"))):
        return f"role {name} does not trust {principal}"
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
) -> str | None:
    """Why the policies do not allow the call, or None when they do."""
    arn = resource(service, action, region, account, params)
    if arn is None:
        return f"the sandbox does not judge {service}:{action}"
    wanted = f"{service}:{action}".lower()
    for document in documents:
        for statement in listed(document.get("Statement")):
            if statement.get("Effect") != "Allow":
                continue
            actions = [a.lower() for a in listed(statement.get("Action"))]
            resources = listed(statement.get("Resource"))
            if any(fnmatch.fnmatchcase(wanted, a) for a in actions) and any(
                fnmatch.fnmatchcase(arn, r) for r in resources
            ):
                return None
    return f"role {role} is not allowed {service}:{action} on {arn}"


def _trusts(statement: dict[str, Any], principal: str) -> bool:
    granted = statement.get("Principal", {})
    services = listed(granted.get("Service")) if isinstance(granted, dict) else []
    actions = listed(statement.get("Action"))
    return (
        statement.get("Effect") == "Allow" and principal in services and "sts:AssumeRole" in actions
    )


def listed(value: Any) -> list[Any]:
    """A policy element as a list (one value or many)."""
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]
