"""What fmctl called in a test, against the permissions it lists for its caller
(``provisioner.catalog.permissions``): every AWS call the product makes in the sandbox
tiers must be one the list covers, so the list a user attaches cannot fall behind the code.

The product's own calls are told from the rest by the User-Agent (``drivers.aws.Aws.agent``,
``fmctl/VERSION``, recorded by the emulator's log as ``agent``): the tests' own clients
(``harness.HARNESS_AGENT``), the sandbox's schedules and functions (their roles' calls, not
the caller's) and the nodes' AWS CLI carry none.

``FMCTL_PERMISSIONS_RECORD=FILE`` appends what was seen (one JSON line per call) instead of
checking: how a maintainer collects the calls of a new feature before listing them.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from provisioner.catalog import permissions

#: Not IAM's: the Kubernetes API answers to the cluster's RBAC (an access entry).
NOT_IAM = frozenset({"kubernetes"})


#: The emulator logs a call's SigV4 signing name; botocore names the service otherwise.
SERVICE_OF_SIGNING = {"servicequotas": "service-quotas", "tagging": "resourcegroupstaggingapi"}


#: A call of fmctl's in the log: the entry, its botocore service and its operation.
Call = tuple[dict[str, Any], str, str]


def fmctl_calls(entries: Iterable[dict[str, Any]]) -> list[Call]:
    """The calls fmctl itself made (its User-Agent), each named by service and operation."""
    calls = []
    for e in entries:
        if not str(e.get("agent") or "").startswith("fmctl/") or e["service"] in NOT_IAM:
            continue
        service = SERVICE_OF_SIGNING.get(str(e["service"]), str(e["service"]))
        calls.append((e, service, operation(service, str(e["action"]), str(e.get("query") or ""))))
    return calls


def operation(service: str, action: str, query_string: str = "") -> str:
    """The operation a logged call was: the log names query and JSON calls by their
    operation, and REST calls (S3, Lambda, Scheduler) by ``METHOD /path?query``, which is
    matched here against the requestUri templates of botocore's model of the service."""
    method, _, target = action.partition(" ")
    if not target.startswith("/"):
        return action
    url = urlsplit(target)
    query = dict(parse_qsl(query_string or url.query, keep_blank_values=True))
    best: tuple[int, int, int, str] | None = None
    for name, (verb, path, literals, headers, deprecated) in _templates(service).items():
        if verb != method or not path.fullmatch(url.path):
            continue
        # x-id names the operation for S3's own routing: botocore may or may not send it.
        needed = {k: v for k, v in literals.items() if k != "x-id"}
        if any(k not in query or (v and query[k] != v) for k, v in needed.items()):
            continue
        # The template that asks most of the query is the one meant; of two alike, the one
        # needing fewer headers (the log keeps none: PutObject, not CopyObject), then the one
        # botocore does not mark deprecated (PutBucketLifecycleConfiguration, whose URI
        # PutBucketLifecycle shares).
        rank = (len(needed), -headers, -deprecated, name)
        if best is None or rank[:3] > best[:3]:
            best = rank
    if best is None:
        raise AssertionError(f"{service}: no operation of botocore's model is {action}")
    return best[3]


@functools.cache
def _templates(
    service: str,
) -> dict[str, tuple[str, re.Pattern[str], dict[str, str], int, bool]]:
    """Each operation's method, path pattern, the query its request must carry (its
    requestUri's literal part and its required query members) and how many headers it
    requires, and whether botocore marks it deprecated."""
    import botocore.session

    model = botocore.session.get_session().get_service_model(service)
    out = {}
    for name in model.operation_names:
        http = model.operation_model(name).http
        path, _, query = str(http["requestUri"]).partition("?")
        # {Key+} spans slashes; {Name} is one segment, or more for an ARN label (an ARN
        # holds slashes, and the emulator logs the path decoded).
        pattern = re.sub(r"\\\{[^}]+\\\+\\\}", ".+", re.escape(path))
        pattern = re.sub(r"\\\{(\w*(?:Arn|ARN|arn)\w*)\\\}", ".+", pattern)
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", pattern)
        literals = dict(parse_qsl(query, keep_blank_values=True))
        shape, headers = model.operation_model(name).input_shape, 0
        members = shape.members if shape is not None else {}
        for member in shape.required_members if shape is not None else ():
            where = members[member].serialization
            if where.get("location") == "querystring":
                literals.setdefault(str(where["name"]), "")
            headers += where.get("location") == "header"
        deprecated = bool(model.operation_model(name).deprecated)
        out[name] = (str(http["method"]), re.compile(pattern), literals, headers, deprecated)
    return out


def not_granted(calls: Iterable[Call]) -> list[str]:
    """fmctl's listed calls that the policies `fmctl permissions` prints would refuse: each
    call's own IAM actions judged against those documents' statements (their Action and
    Resource patterns, and the one condition key they put on such calls, iam:PolicyARN), on
    the resource the call names where the log keeps it (an IAM call's role, instance profile
    or policy; any other call's resource is one the log does not name, which only a
    statement on every resource allows); and iam:PassRole of each role the call hands over."""
    out = []
    for e, service, op in calls:
        if not permissions.covers(service, op):
            continue  # reported as not listed
        names = e.get("names") or {}
        groups = _arns(names) or [[f"arn:aws:{service}:us-east-1:1:unnamed"]]
        for role in e.get("passes") or []:  # a role handed to the service
            to = PASSED_TO_SERVICE.get(f"{service}:{op}")
            if not _granted("iam:PassRole", str(role), None, to):
                out.append(f"iam:PassRole of {role} to {to} ({service}:{op})")
        for action in permissions.own_actions(service, op):
            attached = names.get("PolicyArn") if action in ATTACH else None
            if not all(any(_granted(action, arn, attached) for arn in g) for g in groups):
                out.append(f"{action} on {names or 'its resource'}")
    return out


def _arns(names: dict[str, Any]) -> list[list[str]]:
    """The ARNs an IAM call acts on, by the names it gives: one list of alternatives per
    resource (a role's ARN holds its path: the one the call gives, else either of fmctl's)."""
    paths = (str(names["Path"]),) if "Path" in names else ROLE_PATHS
    out = []
    if "RoleName" in names:
        out.append([f"arn:aws:iam::1:role{p}{names['RoleName']}" for p in paths])
    if "InstanceProfileName" in names:
        profile = names["InstanceProfileName"]
        out.append([f"arn:aws:iam::1:instance-profile{p}{profile}" for p in paths])
    if "PolicyName" in names and "RoleName" not in names:  # CreatePolicy
        out.append([f"arn:aws:iam::1:policy{p}{names['PolicyName']}" for p in paths])
    if "PolicyArn" in names and "RoleName" not in names:  # the policy's own calls
        out.append([str(names["PolicyArn"])])
    return out


def _granted(action: str, arn: str, attached: Any, passed_to: str | None = None) -> bool:
    """Whether a statement of the printed policies allows ``action`` on ``arn`` (a role
    passed to the service ``passed_to``)."""
    for statement in _statements():
        if not any(fnmatch.fnmatchcase(action, a) for a in statement["Action"]):
            continue
        resources = statement["Resource"]
        resources = [resources] if isinstance(resources, str) else resources
        if not any(fnmatch.fnmatchcase(arn, r) for r in resources):
            continue
        held = True
        for keys in statement.get("Condition", {}).values():
            for key, values in keys.items():
                # iam:PolicyARN (on attaching a policy) and iam:PassedToService (on passing
                # a role) are judged; any other key is not, so the statement allows nothing.
                if key == "iam:PassedToService":
                    held &= passed_to is not None and passed_to in values
                    continue
                held &= key == "iam:PolicyARN" and any(
                    fnmatch.fnmatchcase(str(attached), v) for v in values
                )
        if held:
            return True
    return False


@functools.cache
def _statements() -> tuple[dict[str, Any], ...]:
    return tuple(s for _, doc in permissions.policies() for s in doc["Statement"])


#: The service a call hands its role to (``iam:PassedToService``), as AWS documents it,
#: written here from those documents rather than read from fmctl's catalog: Step Functions'
#: IAM policies for Amazon EKS (CreateCluster, CreateNodeGroup: eks.amazonaws.com); the EMR
#: on EKS guide's pod identity setup (pods.eks.amazonaws.com); the AWS managed policies
#: AWSLambda_FullAccess, AmazonEventBridgeSchedulerFullAccess and AmazonEventBridgeFullAccess.
PASSED_TO_SERVICE = {
    "eks:CreateCluster": "eks.amazonaws.com",
    "eks:CreateNodegroup": "eks.amazonaws.com",
    "eks:CreatePodIdentityAssociation": "pods.eks.amazonaws.com",
    "eks:UpdatePodIdentityAssociation": "pods.eks.amazonaws.com",
    # An add-on's podIdentityAssociations (EKS user guide, IAM roles for Amazon EKS add-ons:
    # the add-on makes the Pod Identity association itself).
    "eks:CreateAddon": "pods.eks.amazonaws.com",
    "eks:UpdateAddon": "pods.eks.amazonaws.com",
    "lambda:CreateFunction": "lambda.amazonaws.com",
    "lambda:UpdateFunctionConfiguration": "lambda.amazonaws.com",
    "scheduler:CreateSchedule": "scheduler.amazonaws.com",
    "scheduler:UpdateSchedule": "scheduler.amazonaws.com",
    "events:PutTargets": "events.amazonaws.com",
}
#: The paths of fmctl's roles and instance profiles (``resources.iam``).
ROLE_PATHS = ("/", "/aws-pcs/")
ATTACH = frozenset({"iam:AttachRolePolicy", "iam:DetachRolePolicy"})


def check(entries: list[dict[str, Any]], test: str) -> list[str]:
    """The calls in ``entries`` the list does not cover, as ``service:Operation``, and those
    it lists that its printed policies would not allow (``not_granted``)."""
    calls = fmctl_calls(entries)
    seen = {(service, op) for _, service, op in calls}
    record = os.environ.get("FMCTL_PERMISSIONS_RECORD")
    if record:
        with open(Path(record), "a") as fh:
            for service, action in sorted(seen):
                fh.write(json.dumps({"service": service, "action": action, "test": test}) + "\n")
        return []
    unlisted = sorted(f"{s}:{a}" for s, a in seen if not permissions.covers(s, a))
    return unlisted + [f"not granted by its policies: {c}" for c in not_granted(calls)]
