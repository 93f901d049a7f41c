"""The KMS key that encrypts an EKS cluster's Kubernetes secrets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from provisioner.drivers.aws import error_code
from provisioner.resources.base import FieldChange, How, Kind, Observed, Owned, Policy, policies
from provisioner.resources.context import Context
from provisioner.resources.tags import (
    CREATED_TAG,
    OWNER_TAG,
    RESOURCE_TAG,
    DesiredTags,
    Tags,
    apply_tag_change,
)


@dataclass(frozen=True)
class KmsOut:
    """A KMS key: id and ARN."""

    id: str
    arn: str


@dataclass(frozen=True)
class KmsParams:
    """The key that encrypts the cluster's Kubernetes secrets (envelope encryption)."""

    description: str
    tags: DesiredTags


@dataclass(frozen=True)
class KmsLive:
    """What fmctl manages of the key."""

    rotation: bool
    tags: Tags


class KmsKey(Kind[KmsParams, KmsOut, KmsLive]):
    """The KMS key that encrypts the cluster's Kubernetes secrets."""

    name, params, outputs = "kms-key", KmsParams, KmsOut
    policy = policies(rotation=Policy(How.UPDATE, "EnableKeyRotation"))

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
                    except Exception as exc:  # gone since the tags were listed
                        if error_code(exc) == "NotFoundException":
                            continue
                        raise
                    key = meta["KeyMetadata"]
                    if key["KeyState"] not in ("PendingDeletion", "PendingReplicaDeletion"):
                        out.append((str(key["Arn"]), tags))
            return out

        return ctx.cached("kms:keys", load)

    def read(self, ctx: Context, rid: str, params: KmsParams) -> Observed[KmsOut, KmsLive] | None:
        for arn, tags in self._keys(ctx):
            if tags.get(RESOURCE_TAG) == rid:
                key_id = arn.rsplit("/", 1)[-1]
                rotation = ctx.aws.client("kms").get_key_rotation_status(KeyId=key_id)
                live = KmsLive(bool(rotation["KeyRotationEnabled"]), tags)
                return Observed(KmsOut(key_id, arn), live, key_id)
        return None

    def desired(
        self, ctx: Context, rid: str, params: KmsParams, observed: Observed[KmsOut, KmsLive]
    ) -> KmsLive:
        return KmsLive(True, params.tags.resolve(observed.live.tags.get(CREATED_TAG)))

    def create(self, ctx: Context, rid: str, params: KmsParams) -> KmsOut:
        from provisioner.resources.ec2 import create_or_adopt

        once = ctx.aws.client("kms", retries=False)

        def make() -> KmsOut:
            meta = once.create_key(
                Description=params.description,
                KeyUsage="ENCRYPT_DECRYPT",
                KeySpec="SYMMETRIC_DEFAULT",
                Tags=ctx.tag_list(params.tags, "TagKey", "TagValue"),
            )["KeyMetadata"]
            return KmsOut(meta["KeyId"], meta["Arn"])

        def again() -> KmsOut | None:
            ctx.forget("kms:keys")
            found = self.read(ctx, rid, params)
            return found.outputs if found else None

        # CreateKey takes no client token: after a lost answer, look before trying again.
        out = create_or_adopt(ctx, rid, make, again)
        ctx.aws.client("kms").enable_key_rotation(KeyId=out.id)
        return out

    def update(
        self,
        ctx: Context,
        rid: str,
        params: KmsParams,
        observed: Observed[KmsOut, KmsLive],
        changes: Sequence[FieldChange],
    ) -> KmsOut:
        kms = ctx.aws.client("kms")
        for change in changes:
            if change.path == "rotation":
                kms.enable_key_rotation(KeyId=observed.id)
            if change.path == "tags":
                apply_tag_change(
                    change.after,
                    lambda tags: kms.tag_resource(KeyId=observed.id, Tags=tags),
                    lambda keys: kms.untag_resource(KeyId=observed.id, TagKeys=keys),
                    key="TagKey",
                )
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        return [
            self.owned_item(tags.get(RESOURCE_TAG) or "?", arn.rsplit("/", 1)[-1])
            for arn, tags in self._keys(ctx)
        ]

    def delete(self, ctx: Context, owned: Owned) -> None:
        # KMS never deletes at once; 7 days is the shortest window, and a key pending
        # deletion is neither billed nor usable (and `down` no longer finds it).
        try:
            ctx.aws.client("kms").schedule_key_deletion(KeyId=owned.id, PendingWindowInDays=7)
        except Exception as exc:
            if error_code(exc) not in ("NotFoundException", "KMSInvalidStateException"):
                raise
