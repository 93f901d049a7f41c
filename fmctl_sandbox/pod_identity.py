"""EKS Pod Identity for the programs the sandbox runs in its clusters (``kube_programs``):
the agent's credentials endpoint, and the calls made with its credentials judged as the role.

The endpoint (``/eks-pod-identity/ENDPOINT/v1/credentials``) answers a GET whose
``Authorization`` is a program's pod identity token with credentials of its association's
role, in the shape botocore's ContainerProvider reads (``AccessKeyId``, ``SecretAccessKey``,
``Token``, ``Expiration``; ``AccountId`` too, as the agent adds), once the role is found to
trust ``pods.eks.amazonaws.com`` with the session tags EKS Pod Identity adds (``iam_eval``:
its trust, with sts:TagSession). A token of no program, or of one with no association, is
refused (401), as is a role that does not trust it (403), with the reason.

A request signed with such credentials must carry the session's token
(``X-Amz-Security-Token``; else InvalidClientTokenId, as STS credentials without it are),
not be past the session's expiry (ExpiredToken), and be allowed by the role's policies as
``iam_eval`` judges them; a call it cannot judge is refused, not passed. Refusals are
AccessDenied, 403, naming the assumed role as AWS does ("User: arn:aws:sts::ACCOUNT:
assumed-role/ROLE/SESSION is not authorized to perform: SERVICE:ACTION").
"""

from __future__ import annotations

import hmac
import json
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from fmctl_sandbox import eks_asg, iam_eval, protocol, sigv4
from fmctl_sandbox.kube_programs import Session

if TYPE_CHECKING:
    from fmctl_sandbox.shims import Shims

PREFIX = "/eks-pod-identity/"
PRINCIPAL = "pods.eks.amazonaws.com"
TERMINATE = "TerminateInstanceInAutoScalingGroup"
Answer = tuple[int, dict[str, str], bytes]


def _error(status: int, message: str) -> Answer:
    body = json.dumps({"message": message}).encode()
    return status, {"Content-Type": "application/json"}, body


def credentials(shims: Shims, environ: dict[str, Any]) -> Answer:
    """The agent's answer to ``GET /eks-pod-identity/ENDPOINT/v1/credentials``."""
    parts = environ.get("PATH_INFO", "").removeprefix(PREFIX).split("/")
    if environ.get("REQUEST_METHOD") != "GET" or parts[1:] != ["v1", "credentials"]:
        return _error(404, "not found")
    now = time.time()
    session = shims.kube.programs.issue(parts[0], environ.get("HTTP_AUTHORIZATION", ""), now)
    if session is None:
        return _error(401, "the token is not a pod's with a pod identity association")
    a = session.association
    with shims.lock:
        documents = iam_eval.role_documents(
            a.account, a.role_arn, PRINCIPAL, None, a.session_tags()
        )
    if isinstance(documents, str):
        shims.kube.programs.sessions.pop(session.access_key, None)
        return _error(403, f"AssumeRoleForPodIdentity: {documents}")
    expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(session.expires))
    return (
        200,
        {"Content-Type": "application/json"},
        json.dumps(
            {
                "AccessKeyId": session.access_key,
                "SecretAccessKey": session.secret_key,
                "Token": session.token,
                "AccountId": a.account,
                "Expiration": expires,
            }
        ).encode(),
    )


def session_of(shims: Shims, environ: dict[str, Any]) -> Session | None:
    """The program's session a request is signed with, if it is one."""
    key = protocol.access_key_of(environ)
    return shims.kube.programs.sessions.get(key) if key.startswith("ASIA") else None


def keys(session: Session) -> sigv4.Credentials:
    """The pair the request's signature is checked with."""
    return sigv4.Credentials(session.access_key, session.secret_key)


def judge(
    shims: Shims, session: Session, call: protocol.Call, environ: dict[str, Any]
) -> tuple[protocol.Call, sigv4.Refusal | None]:
    """The call as the role makes it (in the association's account), and why it is refused
    (None: allowed)."""
    a = session.association
    call = replace(call, account=a.account)
    given = str(environ.get("HTTP_X_AMZ_SECURITY_TOKEN", ""))
    if not hmac.compare_digest(given.encode(), session.token.encode()):
        return call, sigv4.Refusal(
            403, "InvalidClientTokenId", "The security token included in the request is invalid."
        )
    if time.time() > session.expires:
        return call, sigv4.Refusal(
            400, "ExpiredToken", "The security token included in the request is expired"
        )
    role = a.role_arn.rsplit("/", 1)[-1]
    with shims.lock:
        documents = iam_eval.role_documents(
            a.account, a.role_arn, PRINCIPAL, None, a.session_tags()
        )
        if isinstance(documents, str):
            why: str | None = documents
        else:
            params: dict[str, Any] = dict(call.params)
            if (call.service, call.action) == ("autoscaling", TERMINATE):
                # Judged on the instance's group and its tags (autoscaling:ResourceTag/KEY).
                found = eks_asg.group_of(
                    shims.world(a.account).eks, call.region, str(params.get("InstanceId", ""))
                )
                if found is not None:
                    params["AutoScalingGroupName"], params["_tags"] = found
            action = call.action[:1].lower() + call.action[1:]
            why = iam_eval.refused(
                documents, role, call.service, action, call.region, a.account, params
            )
    if why is None:
        return call, None
    user = f"arn:aws:sts::{a.account}:assumed-role/{role}/eks-{a.cluster}-{a.service_account}"
    return call, sigv4.Refusal(
        403,
        "AccessDenied",
        f"User: {user} is not authorized to perform: {call.service}:{call.action} ({why})",
    )
