"""EKS Pod Identity associations for the sandbox: a service account of a cluster bound to an
IAM role (moto has none). One association per service account, as EKS allows; the role must
exist in the sandbox's IAM."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import parse_qs

from fmctl_sandbox import protocol as p
from fmctl_sandbox.eks_model import EksError, EksState, now


def _missing() -> EksError:
    return EksError(
        404, "ResourceNotFoundException", "The specified pod identity association was not found."
    )


def _find(s: EksState, region: str, cluster: str, association: str) -> dict[str, Any]:
    item = s.identities.get((region, cluster, association))
    if item is None:
        raise _missing()
    return item


def _create(s: EksState, call: p.Call, base: str, cluster: str) -> dict[str, Any]:
    q, region = call.params, call.region
    s._cluster(region, cluster)
    token = q.get("clientRequestToken")
    for (where, name, _), item in s.identities.items():
        if (where, name) != (region, cluster):
            continue
        if token and item.get("_token") == token:  # a retried create: the same association
            return {"association": _public(item)}
        if (item["namespace"], item["serviceAccount"]) == (q["namespace"], q["serviceAccount"]):
            raise EksError(409, "ResourceInUseException", "Association already exists")
    if not q.get("roleArn", "").startswith("arn:aws:iam::"):
        raise EksError(400, "InvalidParameterException", "roleArn must be an IAM role ARN")
    association = f"a-{uuid.uuid4().hex[:17]}"
    item = {
        "clusterName": cluster,
        "namespace": q["namespace"],
        "serviceAccount": q["serviceAccount"],
        "roleArn": q["roleArn"],
        "associationId": association,
        "associationArn": (
            f"arn:aws:eks:{region}:{s.account}:podidentityassociation/{cluster}/{association}"
        ),
        "tags": q.get("tags", {}),
        "createdAt": now(),
        "modifiedAt": now(),
        "_token": token,
    }
    s.identities[(region, cluster, association)] = item
    return {"association": _public(item)}


def _public(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if not k.startswith("_")}


def _describe(s: EksState, call: p.Call, base: str, cluster: str, association: str) -> Any:
    return {"association": _public(_find(s, call.region, cluster, association))}


def _list(s: EksState, call: p.Call, base: str, cluster: str) -> dict[str, Any]:
    s._cluster(call.region, cluster)
    where = {k: v[0] for k, v in parse_qs(call.params.get("_query", "")).items()}
    keys = ("clusterName", "namespace", "serviceAccount", "associationArn", "associationId")
    return {
        "associations": [
            {k: item[k] for k in keys}
            for (region, name, _), item in sorted(s.identities.items())
            if (region, name) == (call.region, cluster)
            and where.get("namespace", item["namespace"]) == item["namespace"]
            and where.get("serviceAccount", item["serviceAccount"]) == item["serviceAccount"]
        ]
    }


def _update(s: EksState, call: p.Call, base: str, cluster: str, association: str) -> Any:
    item = _find(s, call.region, cluster, association)
    if "roleArn" in call.params:
        item["roleArn"] = call.params["roleArn"]
        item["modifiedAt"] = now()
    return {"association": _public(item)}


def _delete(s: EksState, call: p.Call, base: str, cluster: str, association: str) -> Any:
    item = _find(s, call.region, cluster, association)
    del s.identities[(call.region, cluster, association)]
    return {"association": _public(item)}


#: Operation -> handler.
HANDLERS: dict[str, Any] = {
    "CreatePodIdentityAssociation": _create,
    "ListPodIdentityAssociations": _list,
    "DescribePodIdentityAssociation": _describe,
    "UpdatePodIdentityAssociation": _update,
    "DeletePodIdentityAssociation": _delete,
}
