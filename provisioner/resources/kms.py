"""The KMS keys fmctl makes: the one that encrypts an EKS cluster's Kubernetes secrets, and
the one that encrypts the budget's SNS topic, which AWS Budgets must be let use (a service
publishing to an encrypted topic needs kms:GenerateDataKey* and kms:Decrypt on its key: the
SNS Developer Guide, "Encryption at rest"; an AWS managed key's policy cannot grant it).

A key's policy is its default one (the account's root may administer and use it, so IAM
policies decide who else may: the KMS Developer Guide, "Default key policy") plus, with
``service``, a statement letting that service principal use the key for this account's
resources only (``aws:SourceAccount``)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from provisioner.drivers.aws_errors import NotFound, WrongState
from provisioner.resources.base import (
    FieldChange,
    How,
    Kind,
    Observed,
    Owned,
    Policy,
    Request,
    policies,
)
from provisioner.resources.context import Context
from provisioner.resources.tags import (
    CREATED_TAG,
    OWNER_TAG,
    RESOURCE_TAG,
    DesiredTags,
    Tags,
    tag_updates,
)


@dataclass(frozen=True)
class KmsOut:
    """A KMS key: id and ARN."""

    id: str
    arn: str


@dataclass(frozen=True)
class KmsParams:
    """A key of the cluster's (envelope encryption); ``service``: a service principal that
    may use it too."""

    description: str
    tags: DesiredTags
    service: str | None = None


@dataclass(frozen=True)
class KmsLive:
    """What fmctl manages of the key."""

    rotation: bool
    #: The service principals its policy lets use it.
    services: frozenset[str]
    tags: Tags


def key_policy(account: str, service: str | None) -> str:
    """The key's policy document (see the module's docstring)."""
    statements: list[dict[str, Any]] = [
        {
            "Sid": "AccountAdministers",
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{account}:root"},
            "Action": "kms:*",
            "Resource": "*",
        }
    ]
    if service:
        statements.append(
            {
                "Sid": "ServiceUses",
                "Effect": "Allow",
                "Principal": {"Service": service},
                "Action": ["kms:GenerateDataKey*", "kms:Decrypt"],
                "Resource": "*",
                "Condition": {"StringEquals": {"aws:SourceAccount": account}},
            }
        )
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, sort_keys=True)


def policy_services(document: str) -> frozenset[str]:
    """The service principals a key policy allows anything."""
    out: set[str] = set()
    for statement in _listed(json.loads(document).get("Statement")):
        principal = statement.get("Principal")
        if statement.get("Effect") == "Allow" and isinstance(principal, dict):
            out.update(str(s) for s in _listed(principal.get("Service")))
    return frozenset(out)


def _listed(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


class KmsKey(Kind[KmsParams, KmsOut, KmsLive]):
    """A KMS key of the cluster's."""

    name, params, outputs = "kms-key", KmsParams, KmsOut
    policy = policies(
        rotation=Policy(How.UPDATE, "EnableKeyRotation"),
        services=Policy(How.UPDATE, "PutKeyPolicy replaces the key's policy in place"),
    )

    def _keys(self, ctx: Context) -> list[tuple[str, Tags]]:
        """Usable keys tagged as the cluster's, through the tagging API (one call, however
        many keys the account holds); keys pending deletion are left out."""

        def load() -> list[tuple[str, Tags]]:
            tagging = ctx.aws.client("resourcegroupstaggingapi")
            kms = ctx.aws.client("kms")
            out = []
            pages = tagging.get_paginator("get_resources").paginate(
                TagFilters=[{"Key": OWNER_TAG, "Values": [ctx.cluster]}],
                ResourceTypeFilters=["kms:key"],
            )
            for page in pages:
                for item in page["ResourceTagMappingList"]:
                    tags = Tags.from_list(item.get("Tags"))
                    if tags.get(OWNER_TAG) != ctx.cluster:
                        continue
                    try:
                        meta = kms.describe_key(KeyId=item["ResourceARN"])
                    except NotFound:  # gone since the tags were listed
                        continue
                    key = meta["KeyMetadata"]
                    if key["KeyState"] not in ("PendingDeletion", "PendingReplicaDeletion"):
                        out.append((str(key["Arn"]), tags))
            return out

        return ctx.cached("kms:keys", load)

    def read(self, req: Request[KmsParams]) -> Observed[KmsOut, KmsLive] | None:
        for arn, tags in self._keys(req.ctx):
            if tags.get(RESOURCE_TAG) == req.rid:
                key_id = arn.rsplit("/", 1)[-1]
                kms = req.ctx.aws.client("kms")
                rotation = kms.get_key_rotation_status(KeyId=key_id)
                document = kms.get_key_policy(KeyId=key_id, PolicyName="default")["Policy"]
                live = KmsLive(
                    bool(rotation["KeyRotationEnabled"]), policy_services(document), tags
                )
                return Observed(KmsOut(key_id, arn), live, key_id)
        return None

    def desired(self, req: Request[KmsParams], observed: Observed[KmsOut, KmsLive]) -> KmsLive:
        return KmsLive(
            True,
            frozenset({req.params.service} if req.params.service else ()),
            req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
        )

    def create(self, req: Request[KmsParams]) -> KmsOut:
        from provisioner.resources.ec2 import create_or_adopt

        once = req.ctx.aws.client("kms", retries=False)
        document = key_policy(
            req.ctx.cached("sts:account", req.ctx.aws.account_id), req.params.service
        )

        def make() -> KmsOut:
            meta = once.create_key(
                Description=req.params.description,
                KeyUsage="ENCRYPT_DECRYPT",
                KeySpec="SYMMETRIC_DEFAULT",
                Policy=document,
                Tags=[
                    {"TagKey": k, "TagValue": v}
                    for k, v in sorted(req.params.tags.at_creation().items())
                ],
            )["KeyMetadata"]
            return KmsOut(meta["KeyId"], meta["Arn"])

        def again() -> KmsOut | None:
            req.ctx.forget("kms:keys")
            found = self.read(req)
            return found.outputs if found else None

        # CreateKey takes no client token: after a lost answer, look before trying again.
        out = create_or_adopt(req.ctx, req.rid, make, again)
        req.ctx.aws.client("kms").enable_key_rotation(KeyId=out.id)
        return out

    def update(
        self,
        req: Request[KmsParams],
        observed: Observed[KmsOut, KmsLive],
        changes: Sequence[FieldChange],
    ) -> KmsOut:
        kms = req.ctx.aws.client("kms")
        for change in changes:
            if change.path == "rotation":
                kms.enable_key_rotation(KeyId=observed.id)
            if change.path == "services":
                account = req.ctx.cached("sts:account", req.ctx.aws.account_id)
                kms.put_key_policy(
                    KeyId=observed.id,
                    PolicyName="default",
                    Policy=key_policy(account, req.params.service),
                )
            if change.path == "tags":
                # KMS names a tag's fields TagKey and TagValue.
                add, remove = tag_updates(None, change.after)
                if add:
                    kms.tag_resource(
                        KeyId=observed.id,
                        Tags=[{"TagKey": k, "TagValue": v} for k, v in sorted(add.items())],
                    )
                if remove:
                    kms.untag_resource(KeyId=observed.id, TagKeys=remove)
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        return [
            self.owned_item(tags.get(RESOURCE_TAG) or "?", arn.rsplit("/", 1)[-1])
            for arn, tags in self._keys(ctx)
        ]

    def delete(self, ctx: Context, owned: Owned) -> None:
        # KMS never deletes at once; 7 days is the shortest window, and a key pending
        # deletion is neither billed nor usable (and `down` no longer finds it).
        with contextlib.suppress(NotFound, WrongState):
            ctx.aws.client("kms").schedule_key_deletion(KeyId=owned.id, PendingWindowInDays=7)
