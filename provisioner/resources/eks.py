"""The EKS control plane and what hangs on it directly: the secrets key, access entries and
Pod Identity associations.

What may change in place is EKS's (Amazon EKS API Reference: UpdateClusterVersion,
UpdateClusterConfig, TagResource): the Kubernetes version, one minor version at a time and
never down; endpoint access and its CIDRs; control-plane logging; the upgrade policy. The
cluster's role, its secrets key and (in fmctl) its subnets are fixed: changing them means a
new cluster.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from provisioner.drivers.aws import error_code
from provisioner.graph.ref import UNKNOWN, Ref
from provisioner.resources.base import FieldChange, How, Kind, Observed, Owned, Policy, policies
from provisioner.resources.compute import SgOut
from provisioner.resources.context import Context
from provisioner.resources.errors import Foreign, ResourceError
from provisioner.resources.iam import RoleOut
from provisioner.resources.network import SubnetOut
from provisioner.resources.tags import (
    CREATED_TAG,
    OWNER_TAG,
    RESOURCE_TAG,
    DesiredTags,
    Tags,
    tag_updates,
)

T = TypeVar("T")
ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"


def unless_gone(call: Callable[[], T]) -> T | None:
    """``call()``, or None when EKS answers that what it names does not exist."""
    try:
        return call()
    except Exception as exc:
        if error_code(exc) == "ResourceNotFoundException":
            return None
        raise


def created_or_found(create: Callable[[], T], find: Callable[[], T | None]) -> T:
    """``create()``; when EKS answers that it exists already, what ``find()`` finds: our own
    create whose answer was lost (the client token makes a retry the same request, but a
    re-run of `up` after a crash is a new one). Nothing found: the conflict stands."""
    try:
        return create()
    except Exception as exc:
        if error_code(exc) != "ResourceInUseException":
            raise
        found = find()
        if found is None:
            raise
        return found


def health(item: dict[str, Any]) -> str:
    """EKS's health issues of a resource, as one line."""
    found = (item.get("health") or {}).get("issues") or []
    return "; ".join(f"{i.get('code')}: {i.get('message')}" for i in found) or "no details"


def eks_retag(ctx: Context, arn: str, changes: Sequence[FieldChange]) -> None:
    """Apply a tags change to an EKS resource (cluster, node group, add-on, ...)."""
    eks = ctx.aws.client("eks")
    for change in changes:
        if change.path != "tags":
            continue
        add, remove = tag_updates(change.before, change.after)
        if add:
            eks.tag_resource(resourceArn=arn, tags=add)
        if remove:
            eks.untag_resource(resourceArn=arn, tagKeys=remove)


def caller_principal(ctx: Context) -> str:
    """The IAM principal of the credentials in use (an assumed role's role ARN)."""

    def load() -> str:
        arn = str(ctx.aws.client("sts").get_caller_identity()["Arn"])
        if ":user/" in arn:  # an IAM user (moto answers with an sts-style ARN for one)
            return arn.replace(":sts:", ":iam:")
        if ":assumed-role/" in arn:  # arn:aws:sts::ACCT:assumed-role/ROLE/SESSION
            head, rest = arn.split(":assumed-role/", 1)
            return f"{head.replace(':sts:', ':iam:')}:role/{rest.split('/', 1)[0]}"
        return arn

    return ctx.cached("sts:principal", load)


# -- the secrets key ---------------------------------------------------------------------
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
                    meta = unless_gone(
                        functools.partial(kms.describe_key, KeyId=item["ResourceARN"])
                    )
                    if meta is None:
                        continue
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
                add, remove = tag_updates(change.before, change.after)
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
        try:
            ctx.aws.client("kms").schedule_key_deletion(KeyId=owned.id, PendingWindowInDays=7)
        except Exception as exc:
            if error_code(exc) not in ("NotFoundException", "KMSInvalidStateException"):
                raise


# -- the control plane -------------------------------------------------------------------
@dataclass(frozen=True)
class EksOut:
    """The control plane: name, ARN, endpoint, CA and version."""

    id: str
    arn: str
    endpoint: str
    ca: str
    version: str


@dataclass(frozen=True)
class EksParams:
    """The EKS control plane, as ``render`` writes it in aws/eks-cluster.yaml."""

    cluster_name: str
    version: str
    role: Ref[RoleOut]
    subnets: tuple[Ref[SubnetOut], ...]
    security_groups: tuple[Ref[SgOut], ...]
    endpoint_private: bool
    endpoint_public: bool
    public_cidrs: tuple[str, ...]
    logging: tuple[str, ...]
    #: The key fmctl made, or the ARN of the spec's (kubernetes.secretsKeyArn).
    key: Ref[KmsOut] | str
    authentication_mode: str
    support_type: str
    tags: DesiredTags


@dataclass(frozen=True)
class EksLive:
    """What fmctl manages of the control plane."""

    version: str
    role: Any
    subnets: Any
    security_groups: Any
    endpoint_private: bool
    endpoint_public: bool
    public_cidrs: Any
    logging: Any
    key: Any
    authentication_mode: str
    support_type: str
    tags: Tags


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


class EksCluster(Kind[EksParams, EksOut, EksLive]):
    """The EKS control plane."""

    name, params, outputs = "eks-cluster", EksParams, EksOut
    create_seconds, update_seconds, delete_seconds = 600.0, 600.0, 300.0
    policy = policies(
        version=Policy(How.UPDATE, "UpdateClusterVersion, one minor version at a time"),
        role=Policy(How.REPLACE, "a cluster's IAM role is fixed at creation"),
        subnets=Policy(How.REPLACE, "fmctl keeps a control plane in the subnets it made it in"),
        security_groups=Policy(
            How.REPLACE, "fmctl keeps a control plane's security groups as made"
        ),
        endpoint_private=Policy(How.UPDATE, "UpdateClusterConfig resourcesVpcConfig"),
        endpoint_public=Policy(How.UPDATE, "UpdateClusterConfig resourcesVpcConfig"),
        public_cidrs=Policy(How.UPDATE, "UpdateClusterConfig resourcesVpcConfig"),
        logging=Policy(How.UPDATE, "UpdateClusterConfig logging"),
        key=Policy(
            How.IMMUTABLE,
            "secrets encryption cannot be turned off or moved to another key once on",
        ),
        authentication_mode=Policy(How.UPDATE, "UpdateClusterConfig accessConfig"),
        support_type=Policy(How.UPDATE, "UpdateClusterConfig upgradePolicy"),
    )

    def describe(self, ctx: Context) -> dict[str, Any] | None:
        """The cluster as EKS describes it, or None."""
        eks = ctx.aws.client("eks")
        found: dict[str, Any] | None = unless_gone(
            lambda: eks.describe_cluster(name=ctx.cluster)["cluster"]
        )
        return found

    def _described(self, ctx: Context) -> dict[str, Any] | None:
        return ctx.cached("eks:cluster", lambda: self.describe(ctx))

    @staticmethod
    def out_of(c: dict[str, Any]) -> EksOut:
        """The outputs of a described cluster."""
        return EksOut(
            c["name"],
            c["arn"],
            c.get("endpoint", ""),
            (c.get("certificateAuthority") or {}).get("data", ""),
            c.get("version", ""),
        )

    def read(self, ctx: Context, rid: str, params: EksParams) -> Observed[EksOut, EksLive] | None:
        c = self._described(ctx)
        if c is None:
            return None
        tags = Tags.of(c.get("tags") or {})
        if tags.get(OWNER_TAG) != ctx.cluster:
            raise Foreign(
                f"an EKS cluster named {ctx.cluster} exists and is not fmctl's (no "
                "fmctl.dev/cluster tag): fmctl will not take it over",
                hint="pick another cluster name",
            )
        if c["status"] in ("FAILED", "DELETING"):
            raise ResourceError(
                f"EKS cluster {ctx.cluster} is {c['status']}",
                hint=f"`fmctl down {ctx.cluster}` and `fmctl up` again",
            )
        vpc = c.get("resourcesVpcConfig", {})
        logging = frozenset(
            t
            for entry in (c.get("logging") or {}).get("clusterLogging", [])
            if entry.get("enabled")
            for t in entry.get("types", [])
        )
        keys = [e["provider"]["keyArn"] for e in c.get("encryptionConfig") or []]
        live = EksLive(
            str(c.get("version", "")),
            c.get("roleArn"),
            frozenset(vpc.get("subnetIds", [])),
            frozenset(vpc.get("securityGroupIds", [])),
            bool(vpc.get("endpointPrivateAccess")),
            bool(vpc.get("endpointPublicAccess")),
            frozenset(vpc.get("publicAccessCidrs", []))
            if vpc.get("endpointPublicAccess")
            else (frozenset()),
            logging,
            keys[0] if keys else None,
            str((c.get("accessConfig") or {}).get("authenticationMode", "")),
            str((c.get("upgradePolicy") or {}).get("supportType", "STANDARD")),
            tags,
        )
        pending = None if c["status"] == "ACTIVE" else str(c["status"])
        return Observed(self.out_of(c), live, c["name"], pending)

    def desired(
        self, ctx: Context, rid: str, params: EksParams, observed: Observed[EksOut, EksLive]
    ) -> EksLive:
        key = params.key if isinstance(params.key, str) else ctx.resolve(params.key, "arn")
        return EksLive(
            params.version,
            ctx.resolve(params.role, "arn"),
            frozenset(ctx.resolve(s) for s in params.subnets)
            if all(ctx.known(s) for s in params.subnets)
            else UNKNOWN,
            frozenset(ctx.resolve(g) for g in params.security_groups)
            if all(ctx.known(g) for g in params.security_groups)
            else UNKNOWN,
            params.endpoint_private,
            params.endpoint_public,
            frozenset(params.public_cidrs) if params.endpoint_public else frozenset(),
            frozenset(params.logging),
            key,
            params.authentication_mode,
            params.support_type,
            params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
        )

    def diff(
        self, ctx: Context, rid: str, params: EksParams, observed: Observed[EksOut, EksLive]
    ) -> list[FieldChange]:
        out = []
        for change in super().diff(ctx, rid, params, observed):
            if change.path == "version" and _minor(change.after) < _minor(change.before):
                change = FieldChange(
                    change.path,
                    change.before,
                    change.after,
                    How.IMMUTABLE,
                    "EKS cannot downgrade a cluster's Kubernetes version",
                )
            elif change.path == "version":
                steps = self.steps(change.before, change.after)
                change = FieldChange(
                    change.path,
                    change.before,
                    change.after,
                    How.UPDATE,
                    f"UpdateClusterVersion, one minor version at a time: {' -> '.join(steps)}",
                )
            out.append(change)
        return out

    @staticmethod
    def steps(current: str, target: str) -> list[str]:
        """The versions an upgrade goes through, one minor at a time."""
        major, minor = _minor(current)
        _, last = _minor(target)
        return [f"{major}.{m}" for m in range(minor, last + 1)]

    def create(self, ctx: Context, rid: str, params: EksParams) -> EksOut:
        eks = ctx.aws.client("eks")
        key = params.key if isinstance(params.key, str) else ctx.get(params.key).arn
        vpc: dict[str, Any] = {
            "subnetIds": [ctx.get(s).id for s in params.subnets],
            "securityGroupIds": [ctx.get(g).id for g in params.security_groups],
            "endpointPrivateAccess": params.endpoint_private,
            "endpointPublicAccess": params.endpoint_public,
        }
        if params.endpoint_public:
            vpc["publicAccessCidrs"] = list(params.public_cidrs)
        request = {
            "name": params.cluster_name,
            "version": params.version,
            "roleArn": ctx.get(params.role).arn,
            "resourcesVpcConfig": vpc,
            "accessConfig": {
                "authenticationMode": params.authentication_mode,
                "bootstrapClusterCreatorAdminPermissions": True,
            },
            "logging": {"clusterLogging": [{"types": list(params.logging), "enabled": True}]},
            "encryptionConfig": [{"resources": ["secrets"], "provider": {"keyArn": key}}],
            "upgradePolicy": {"supportType": params.support_type},
            "tags": params.tags.at_creation(),
        }

        def again() -> EksOut | None:
            ctx.forget("eks:cluster")
            found = self.read(ctx, rid, params)
            return found.outputs if found else None

        created_or_found(
            lambda: eks.create_cluster(**request, clientRequestToken=ctx.token(rid)), again
        )
        return self._active(ctx, rid, self.create_seconds, "ACTIVE")

    def _active(self, ctx: Context, rid: str, expected: float, what: str) -> EksOut:
        def probe() -> EksOut | None:
            c = self.describe(ctx)
            if c is None:
                raise ResourceError(f"EKS cluster {ctx.cluster} disappeared while {what}")
            if c["status"] == "FAILED":
                raise ResourceError(f"EKS cluster {ctx.cluster} FAILED: {health(c)}")
            return self.out_of(c) if c["status"] == "ACTIVE" else None

        return ctx.wait_until(f"EKS cluster {ctx.cluster} to be {what}", probe, expected, 1800, rid)

    def wait(
        self, ctx: Context, rid: str, params: EksParams, observed: Observed[EksOut, EksLive]
    ) -> EksOut:
        return self._active(ctx, rid, self.create_seconds, "ACTIVE")

    def update(
        self,
        ctx: Context,
        rid: str,
        params: EksParams,
        observed: Observed[EksOut, EksLive],
        changes: Sequence[FieldChange],
    ) -> EksOut:
        paths = {c.path for c in changes}
        out = observed.outputs
        if paths & {"endpoint_private", "endpoint_public", "public_cidrs"}:
            vpc: dict[str, Any] = {
                "endpointPrivateAccess": params.endpoint_private,
                "endpointPublicAccess": params.endpoint_public,
            }
            if params.endpoint_public:
                vpc["publicAccessCidrs"] = list(params.public_cidrs)
            self._config(ctx, rid, resourcesVpcConfig=vpc)
        if "logging" in paths:
            self._config(
                ctx,
                rid,
                logging={"clusterLogging": [{"types": list(params.logging), "enabled": True}]},
            )
        if "authentication_mode" in paths:
            self._config(ctx, rid, accessConfig={"authenticationMode": params.authentication_mode})
        if "support_type" in paths:
            self._config(ctx, rid, upgradePolicy={"supportType": params.support_type})
        if "version" in paths:
            out = self._upgrade(ctx, rid, params.version)
        eks_retag(ctx, observed.outputs.arn, changes)
        return self._active(ctx, rid, 5.0, "ACTIVE") if paths - {"tags"} else out

    def _config(self, ctx: Context, rid: str, **change: Any) -> None:
        eks = ctx.aws.client("eks")
        eks.update_cluster_config(name=ctx.cluster, **change)
        ctx.emit(rid, "updating", ", ".join(sorted(change)))
        self._active(ctx, rid, 60.0, "updated")

    def _upgrade(self, ctx: Context, rid: str, target: str) -> EksOut:
        """One minor version at a time, from whatever the cluster runs now (a run stopped
        halfway resumes where it was)."""
        eks = ctx.aws.client("eks")
        out = self._active(ctx, rid, 5.0, "ACTIVE")
        while _minor(out.version) < _minor(target):
            major, minor = _minor(out.version)
            step = f"{major}.{minor + 1}"
            ctx.emit(rid, "updating", f"Kubernetes {out.version} -> {step}")
            eks.update_cluster_version(
                name=ctx.cluster, version=step, clientRequestToken=ctx.token(f"{rid}/{step}")
            )
            out = self._active(ctx, rid, self.update_seconds, f"running {step}")
        return out

    def find_owned(self, ctx: Context) -> list[Owned]:
        c = self._described(ctx)
        if c is None or (c.get("tags") or {}).get(OWNER_TAG) != ctx.cluster:
            return []
        return [self.owned_item((c.get("tags") or {}).get(RESOURCE_TAG, "eks"), c["name"])]

    def delete(self, ctx: Context, owned: Owned) -> None:
        eks = ctx.aws.client("eks")
        if unless_gone(lambda: eks.delete_cluster(name=owned.id)) is None:
            return
        ctx.wait_until(
            f"EKS cluster {owned.id} to be deleted",
            lambda: True if self.describe(ctx) is None else None,
            self.delete_seconds,
            1800,
            owned.resource,
        )


def cluster_ours(ctx: Context) -> bool:
    """True when the cluster's EKS control plane exists and is fmctl's (its parts can only
    be listed through it)."""
    c = EksCluster()._described(ctx)
    return c is not None and (c.get("tags") or {}).get(OWNER_TAG) == ctx.cluster


# -- access entries ----------------------------------------------------------------------
@dataclass(frozen=True)
class AccessOut:
    """An access entry by principal."""

    id: str


@dataclass(frozen=True)
class AccessParams:
    """An access entry: the node role (EC2_LINUX), or the caller (``principal`` None) as
    cluster admin."""

    cluster: Ref[EksOut]
    principal: Ref[RoleOut] | None
    entry_type: str
    tags: DesiredTags
    policy: str | None = None


@dataclass(frozen=True)
class AccessLive:
    """What fmctl manages of an access entry."""

    entry_type: str
    policies: Any
    tags: Tags


class AccessEntry(Kind[AccessParams, AccessOut, AccessLive]):
    """An EKS access entry."""

    name, params, outputs = "eks-access-entry", AccessParams, AccessOut
    policy = policies(
        entry_type=Policy(How.REPLACE, "an access entry's type is fixed (CreateAccessEntry)"),
        policies=Policy(How.UPDATE, "AssociateAccessPolicy / DisassociateAccessPolicy"),
    )

    def _principal(self, ctx: Context, params: AccessParams) -> Any:
        if params.principal is None:
            return caller_principal(ctx)
        return ctx.resolve(params.principal, "arn")

    def _entries(self, ctx: Context) -> dict[str, dict[str, Any]]:
        """Principal -> the cluster's access entry (one listing, one describe each, per
        run)."""

        def load() -> dict[str, dict[str, Any]]:
            if not cluster_ours(ctx):
                return {}
            eks = ctx.aws.client("eks")
            out = {}
            for principal in eks.list_access_entries(clusterName=ctx.cluster)["accessEntries"]:
                entry = unless_gone(
                    functools.partial(
                        eks.describe_access_entry, clusterName=ctx.cluster, principalArn=principal
                    )
                )
                if entry is not None:
                    out[principal] = entry["accessEntry"]
            return out

        return ctx.cached("eks:access-entries", load)

    def read(
        self, ctx: Context, rid: str, params: AccessParams
    ) -> Observed[AccessOut, AccessLive] | None:
        principal = self._principal(ctx, params)
        if principal is UNKNOWN:
            return None
        entry = self._entries(ctx).get(principal)
        if entry is None:
            return None
        listed = ctx.aws.client("eks").list_associated_access_policies(
            clusterName=ctx.cluster, principalArn=principal
        )["associatedAccessPolicies"]
        policies = frozenset(p["policyArn"] for p in listed)
        live = AccessLive(entry["type"], policies, Tags.of(entry.get("tags") or {}))
        return Observed(AccessOut(principal), live, principal)

    def desired(
        self,
        ctx: Context,
        rid: str,
        params: AccessParams,
        observed: Observed[AccessOut, AccessLive],
    ) -> AccessLive:
        return AccessLive(
            params.entry_type,
            frozenset([params.policy] if params.policy else []),
            params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
        )

    def create(self, ctx: Context, rid: str, params: AccessParams) -> AccessOut:
        principal = self._principal(ctx, params)
        try:
            ctx.aws.client("eks").create_access_entry(
                clusterName=ctx.cluster,
                principalArn=principal,
                type=params.entry_type,
                tags=params.tags.at_creation(),
                clientRequestToken=ctx.token(f"{rid}/{principal}"),
            )
        except Exception as exc:
            # The cluster's creator has an entry from bootstrapClusterCreatorAdminPermissions.
            if error_code(exc) != "ResourceInUseException":
                raise
        self._associate(ctx, params, principal)
        return AccessOut(principal)

    def _associate(self, ctx: Context, params: AccessParams, principal: str) -> None:
        if params.policy:
            ctx.aws.client("eks").associate_access_policy(
                clusterName=ctx.cluster,
                principalArn=principal,
                policyArn=params.policy,
                accessScope={"type": "cluster"},
            )

    def update(
        self,
        ctx: Context,
        rid: str,
        params: AccessParams,
        observed: Observed[AccessOut, AccessLive],
        changes: Sequence[FieldChange],
    ) -> AccessOut:
        eks = ctx.aws.client("eks")
        if any(c.path == "policies" for c in changes):
            self._associate(ctx, params, observed.id)
            for stale in sorted(observed.live.policies - {params.policy}):
                eks.disassociate_access_policy(
                    clusterName=ctx.cluster, principalArn=observed.id, policyArn=stale
                )
        if any(c.path == "tags" for c in changes):
            entry = eks.describe_access_entry(clusterName=ctx.cluster, principalArn=observed.id)
            eks_retag(ctx, entry["accessEntry"]["accessEntryArn"], changes)
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        out = []
        for principal, entry in sorted(self._entries(ctx).items()):
            tags = entry.get("tags") or {}
            if tags.get(OWNER_TAG) == ctx.cluster:
                out.append(self.owned_item(tags.get(RESOURCE_TAG, "?"), principal))
        return out

    def delete(self, ctx: Context, owned: Owned) -> None:
        eks = ctx.aws.client("eks")
        unless_gone(lambda: eks.delete_access_entry(clusterName=ctx.cluster, principalArn=owned.id))
