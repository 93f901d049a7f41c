"""IAM roles (with instance profiles for node roles) and customer-managed policies: least
privilege, named per cluster and region (IAM is global to the account), owned by tag."""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from provisioner.drivers.aws_errors import AlreadyExists, NotFound
from provisioner.render.images import partition
from provisioner.resources.base import FieldChange, Kind, Observed, Owned, Request
from provisioner.resources.context import Context
from provisioner.resources.ec2 import retry_dependency
from provisioner.resources.errors import Foreign
from provisioner.resources.names import ROLE_NAME_LIMIT, bounded, head_of
from provisioner.resources.storage import account_of
from provisioner.resources.tags import (
    CREATED_TAG,
    OWNER_TAG,
    REGION_TAG,
    RESOURCE_TAG,
    AwsTag,
    DesiredTags,
    Tags,
    apply_tag_change,
    aws_tags,
    tag_updates,
)

#: Where fmctl's customer-managed policies live in IAM (their ARNs carry it). ParallelCluster's
#: documented least-privilege user policy lets `pcluster` attach customer policies under
#: policy/parallelcluster* only (and a short list of AWS-managed ones, AMP's not among them).
POLICY_PATH = "/parallelcluster/"


def role_name(cluster: str, region: str, role: str) -> str:
    """Stable and unique per cluster, region and role (IAM names are global to the
    account), within IAM's limit (``names.bounded``)."""
    return bounded(f"fmctl-{cluster}-{region}-{role}", ROLE_NAME_LIMIT)


def role_prefix(cluster: str, region: str) -> str:
    """What the names of a cluster's roles, profiles and policies in a region start with
    (so does another cluster's whose name starts the same, and the same cluster's in a
    region whose name starts the same once cut: ``owned_here`` decides)."""
    return head_of(f"fmctl-{cluster}-{region}-", ROLE_NAME_LIMIT)


def owned_here(name: str, tags: Tags | None, cluster: str, region: str) -> bool:
    """Whether the IAM object ``name`` (tagged ``tags``) is ``cluster``'s in ``region``.

    IAM is one namespace for the whole account, and a long cluster name cuts the region off
    the name's readable head (``fmctl-NAME-ap-north…-HASH`` in ap-northeast-1 and -2 alike),
    so the owner tag is not enough: the region tag must name ``region``. An object made
    before fmctl wrote that tag is judged by its exact name instead: the one fmctl gives the
    logical id its resource tag carries (``iam/ROLE`` -> ``role_name(cluster, region,
    ROLE)``), which differs between regions by its hash."""
    if tags is None or tags.get(OWNER_TAG) != cluster:
        return False
    where = tags.get(REGION_TAG)
    if where is not None:
        return where == region
    logical = tags.get(RESOURCE_TAG) or ""
    return logical.startswith("iam/") and name == role_name(cluster, region, logical[4:])


def canonical(document: Any) -> str:
    """A policy document as canonical JSON (IAM may hand it back URL-encoded)."""
    if isinstance(document, str):
        document = json.loads(unquote(document))
    return json.dumps(document, sort_keys=True)


def _tags_or_none(read: Callable[[], Sequence[AwsTag]]) -> Tags | None:
    """Tags read by ``read``, or None when the entity does not exist."""
    try:
        return Tags.from_list(read())
    except NotFound:
        return None


def _claim(tags: Tags | None, what: str, cluster: str) -> bool:
    """True when ``what`` exists and is ``cluster``'s; False when it does not exist; raises
    when it is someone else's (fmctl never takes over what it did not make)."""
    if tags is None:
        return False
    if tags.get(OWNER_TAG) != cluster:
        raise Foreign(
            f"{what} exists and is not owned by fmctl cluster {cluster}; fmctl will not take "
            "it over",
            hint="delete it, or pick another cluster name",
        )
    return True


@dataclass(frozen=True)
class RoleOut:
    """A role by name, and its ARN."""

    id: str
    arn: str


@dataclass(frozen=True)
class RoleParams:
    """An IAM role: who may assume it, AWS-managed policies, an inline policy of fmctl's
    (named actions only, never "*"), and an instance profile when EC2 assumes it."""

    role_name: str
    trust: str  # canonical JSON
    managed: tuple[str, ...]
    inline_name: str
    inline: str | None  # canonical JSON
    instance_profile: bool
    description: str
    tags: DesiredTags
    #: IAM path of the role and its profile (AWS PCS accepts a node role by its path,
    #: /aws-pcs/, or its name's prefix); a change is a new role.
    path: str = "/"


#: What a trust policy planned offline says where the account id goes (its confused-deputy
#: conditions, ``aws:SourceAccount`` and ``aws:SourceArn``): filled with the caller's account
#: when the role is read, made or changed.
ACCOUNT = "<fmctl:account>"


def trust_of(ctx: Context, params: RoleParams) -> str:
    """The role's trust policy with the account filled in."""
    if ACCOUNT not in params.trust:
        return params.trust
    return params.trust.replace(ACCOUNT, account_of(ctx))


@dataclass(frozen=True)
class RoleLive:
    """What fmctl manages of a role."""

    trust: str
    managed: frozenset[str]
    inline: str | None
    instance_profile: bool
    tags: Tags


class Role(Kind[RoleParams, RoleOut, RoleLive]):
    """An IAM role for the cluster, with an instance profile when EC2 assumes it."""

    name, params, outputs = "iam-role", RoleParams, RoleOut
    create_seconds = delete_seconds = 3.0

    def read(self, req: Request[RoleParams]) -> Observed[RoleOut, RoleLive] | None:
        iam = req.ctx.aws.client("iam")
        name = req.params.role_name
        tags = self._tags(req.ctx, name)
        if not _claim(tags, f"IAM role {name}", req.ctx.cluster):
            return None
        assert tags is not None
        role = iam.get_role(RoleName=name)["Role"]
        attached = frozenset(
            p["PolicyName"]
            for p in iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"]
        )
        inline = None
        if req.params.inline_name in iam.list_role_policies(RoleName=name)["PolicyNames"]:
            doc = iam.get_role_policy(RoleName=name, PolicyName=req.params.inline_name)
            inline = canonical(doc["PolicyDocument"])
        profile = False
        if req.params.instance_profile:
            profile = name in self._profile_roles(req.ctx, name)
        live = RoleLive(
            canonical(role["AssumeRolePolicyDocument"]), attached, inline, profile, tags
        )
        return Observed(RoleOut(name, role["Arn"]), live, name)

    def _profile_roles(self, ctx: Context, name: str) -> list[str]:
        try:
            profile = ctx.aws.client("iam").get_instance_profile(InstanceProfileName=name)
        except NotFound:
            return []
        return [r["RoleName"] for r in profile["InstanceProfile"]["Roles"]]

    def desired(self, req: Request[RoleParams], observed: Observed[RoleOut, RoleLive]) -> RoleLive:
        return RoleLive(
            trust_of(req.ctx, req.params),
            frozenset(req.params.managed),
            req.params.inline,
            req.params.instance_profile,
            req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
        )

    def create(self, req: Request[RoleParams]) -> RoleOut:
        iam = req.ctx.aws.client("iam")
        name = req.params.role_name
        try:
            iam.create_role(
                RoleName=name,
                AssumeRolePolicyDocument=trust_of(req.ctx, req.params),
                Description=req.params.description,
                Tags=req.ctx.tag_list(req.params.tags),
                MaxSessionDuration=3600,
                Path=req.params.path,
            )
        except AlreadyExists:
            # Lost tags (or none) are not ours either.
            tags = _tags_or_none(lambda: iam.list_role_tags(RoleName=name)["Tags"])
            _claim(tags or Tags(), f"IAM role {name}", req.ctx.cluster)
        self._converge(req.ctx, req.params, frozenset(), None, False)
        return RoleOut(name, iam.get_role(RoleName=name)["Role"]["Arn"])

    def _converge(
        self,
        ctx: Context,
        params: RoleParams,
        attached: frozenset[str],
        inline: str | None,
        profile: bool,
    ) -> None:
        """Attach what is missing, detach what the spec no longer names, put the inline
        policy, and make the instance profile hold the role."""
        iam = ctx.aws.client("iam")
        name = params.role_name
        arn = f"arn:{partition(ctx.region)}:iam::aws:policy/"
        live = {
            p["PolicyName"]
            for p in iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"]
        } | attached
        for policy in sorted(set(params.managed) - live):
            iam.attach_role_policy(RoleName=name, PolicyArn=arn + policy)
        for policy in sorted(live - set(params.managed)):
            with_prefix = arn + policy
            with contextlib.suppress(NotFound):
                iam.detach_role_policy(RoleName=name, PolicyArn=with_prefix)
        if params.inline is not None and params.inline != inline:
            iam.put_role_policy(
                RoleName=name, PolicyName=params.inline_name, PolicyDocument=params.inline
            )
        if params.inline is None and inline is not None:
            iam.delete_role_policy(RoleName=name, PolicyName=params.inline_name)
        if params.instance_profile and not profile:
            self._profile(ctx, params)

    def _profile(self, ctx: Context, params: RoleParams) -> None:
        iam = ctx.aws.client("iam")
        name = params.role_name
        try:
            held = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
        except NotFound:
            held = iam.create_instance_profile(
                InstanceProfileName=name, Path=params.path, Tags=ctx.tag_list(params.tags)
            )["InstanceProfile"]
        if not any(r["RoleName"] == name for r in held["Roles"]):
            iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)

    def update(
        self,
        req: Request[RoleParams],
        observed: Observed[RoleOut, RoleLive],
        changes: Sequence[FieldChange],
    ) -> RoleOut:
        iam = req.ctx.aws.client("iam")
        paths = {c.path for c in changes}
        if "trust" in paths:
            iam.update_assume_role_policy(
                RoleName=req.params.role_name, PolicyDocument=trust_of(req.ctx, req.params)
            )
        if paths & {"managed", "inline", "instance_profile"}:
            live = observed.live
            self._converge(req.ctx, req.params, live.managed, live.inline, live.instance_profile)
        for change in changes:
            if change.path == "tags":
                add, remove = tag_updates(change.before, change.after)
                self._retag(req.ctx, req.params, add, remove)
        return observed.outputs

    def _retag(
        self, ctx: Context, params: RoleParams, add: dict[str, str], remove: list[str]
    ) -> None:
        iam = ctx.aws.client("iam")
        name = params.role_name
        pairs = aws_tags(add)
        if add:
            iam.tag_role(RoleName=name, Tags=pairs)
        if remove:
            iam.untag_role(RoleName=name, TagKeys=remove)
        if params.instance_profile:
            if add:
                iam.tag_instance_profile(InstanceProfileName=name, Tags=pairs)
            if remove:
                iam.untag_instance_profile(InstanceProfileName=name, TagKeys=remove)

    def find_owned(self, ctx: Context) -> list[Owned]:
        """The cluster's roles, and instance profiles whose role is already gone (a `down`
        stopped between the two), by fmctl's naming, with the ownership tag checked."""
        iam = ctx.aws.client("iam")
        prefix = role_prefix(ctx.cluster, ctx.region)
        out: dict[str, Owned] = {}
        for page in iam.get_paginator("list_roles").paginate():
            for role in page["Roles"]:
                name = role["RoleName"]
                if not name.startswith(prefix):
                    continue
                tags = self._tags(ctx, name)
                if tags is not None and owned_here(name, tags, ctx.cluster, ctx.region):
                    out[name] = self.owned_item(tags.get(RESOURCE_TAG) or "?", name)
        for listed in iam.get_paginator("list_instance_profiles").paginate():
            for profile in listed["InstanceProfiles"]:
                name = profile["InstanceProfileName"]
                if name in out or not name.startswith(prefix):
                    continue
                tags = self._profile_tags(ctx, name)
                if tags is not None and owned_here(name, tags, ctx.cluster, ctx.region):
                    out[name] = self.owned_item(tags.get(RESOURCE_TAG) or "?", name)
        return sorted(out.values(), key=lambda o: o.id)

    def _tags(self, ctx: Context, name: str) -> Tags | None:
        """The role's tags (None: no such role), read once per run."""
        iam = ctx.aws.client("iam")
        return ctx.cached(
            f"iam:role-tags:{name}",
            lambda: _tags_or_none(lambda: iam.list_role_tags(RoleName=name)["Tags"]),
        )

    def _profile_tags(self, ctx: Context, name: str) -> Tags | None:
        iam = ctx.aws.client("iam")
        # GetInstanceProfile carries the tags (moto lacks ListInstanceProfileTags).
        return _tags_or_none(
            lambda: iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"].get(
                "Tags", []
            )
        )

    def _delete_profile(self, ctx: Context, name: str) -> None:
        """Our instance profile, looked up by name and not through the role: a run stopped
        between taking the role out of it and deleting it leaves it holding no role."""
        tags = self._profile_tags(ctx, name)
        if tags is None or tags.get(OWNER_TAG) != ctx.cluster:
            return
        iam = ctx.aws.client("iam")
        try:
            profile = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
            for role in profile["Roles"]:
                iam.remove_role_from_instance_profile(
                    InstanceProfileName=name, RoleName=role["RoleName"]
                )
            iam.delete_instance_profile(InstanceProfileName=name)
        except NotFound:
            pass

    def delete(self, ctx: Context, owned: Owned) -> None:
        iam = ctx.aws.client("iam")
        self._delete_profile(ctx, owned.id)
        try:
            # Profiles of other names holding our role: take the role out, leave them be.
            profiles = iam.list_instance_profiles_for_role(RoleName=owned.id)["InstanceProfiles"]
            for profile in profiles:
                iam.remove_role_from_instance_profile(
                    InstanceProfileName=profile["InstanceProfileName"], RoleName=owned.id
                )
            for policy in iam.list_attached_role_policies(RoleName=owned.id)["AttachedPolicies"]:
                iam.detach_role_policy(RoleName=owned.id, PolicyArn=policy["PolicyArn"])
            for inline in iam.list_role_policies(RoleName=owned.id)["PolicyNames"]:
                iam.delete_role_policy(RoleName=owned.id, PolicyName=inline)
        except NotFound:
            return
        retry_dependency(functools.partial(iam.delete_role, RoleName=owned.id), owned.id, ctx)


@dataclass(frozen=True)
class PolicyOut:
    """A customer-managed policy by ARN."""

    id: str
    arn: str


@dataclass(frozen=True)
class PolicyParams:
    """A customer-managed IAM policy of the cluster's (ParallelCluster's AdditionalIamPolicies
    take ARNs only: a statement scoped to one resource needs a policy of its own)."""

    policy_name: str
    document: str  # canonical JSON
    description: str
    tags: DesiredTags


@dataclass(frozen=True)
class PolicyLive:
    """The default version's document, and the tags."""

    document: str
    tags: Tags


class ManagedPolicy(Kind[PolicyParams, PolicyOut, PolicyLive]):
    """A customer-managed IAM policy under fmctl's path; a changed document becomes the new
    default version (IAM keeps five)."""

    name, params, outputs = "iam-policy", PolicyParams, PolicyOut

    def _arn(self, ctx: Context, policy_name: str) -> str:
        account = account_of(ctx)
        return f"arn:{partition(ctx.region)}:iam::{account}:policy{POLICY_PATH}{policy_name}"

    def read(self, req: Request[PolicyParams]) -> Observed[PolicyOut, PolicyLive] | None:
        iam = req.ctx.aws.client("iam")
        arn = self._arn(req.ctx, req.params.policy_name)
        tags = _tags_or_none(lambda: iam.list_policy_tags(PolicyArn=arn)["Tags"])
        if not _claim(tags, f"IAM policy {arn}", req.ctx.cluster):
            return None
        assert tags is not None
        default = iam.get_policy(PolicyArn=arn)["Policy"]["DefaultVersionId"]
        live = iam.get_policy_version(PolicyArn=arn, VersionId=default)["PolicyVersion"]
        return Observed(PolicyOut(arn, arn), PolicyLive(canonical(live["Document"]), tags), arn)

    def desired(
        self, req: Request[PolicyParams], observed: Observed[PolicyOut, PolicyLive]
    ) -> PolicyLive:
        return PolicyLive(
            req.params.document, req.params.tags.resolve(observed.live.tags.get(CREATED_TAG))
        )

    def create(self, req: Request[PolicyParams]) -> PolicyOut:
        iam = req.ctx.aws.client("iam")
        arn = self._arn(req.ctx, req.params.policy_name)
        try:
            iam.create_policy(
                PolicyName=req.params.policy_name,
                Path=POLICY_PATH,
                PolicyDocument=req.params.document,
                Description=req.params.description,
                Tags=req.ctx.tag_list(req.params.tags),
            )
        except AlreadyExists:
            tags = _tags_or_none(lambda: iam.list_policy_tags(PolicyArn=arn)["Tags"])
            _claim(tags or Tags(), f"IAM policy {arn}", req.ctx.cluster)
            self._new_version(req.ctx, arn, req.params.document)
        return PolicyOut(arn, arn)

    def _new_version(self, ctx: Context, arn: str, document: str) -> None:
        """Make ``document`` the default version, keeping at most IAM's five versions."""
        iam = ctx.aws.client("iam")
        default = iam.get_policy(PolicyArn=arn)["Policy"]["DefaultVersionId"]
        live = iam.get_policy_version(PolicyArn=arn, VersionId=default)["PolicyVersion"]
        if canonical(live["Document"]) == document:
            return
        versions = iam.list_policy_versions(PolicyArn=arn)["Versions"]
        old = sorted(
            (v for v in versions if not v["IsDefaultVersion"]), key=lambda v: v["CreateDate"]
        )
        if len(versions) >= 5 and old:
            iam.delete_policy_version(PolicyArn=arn, VersionId=old[0]["VersionId"])
        iam.create_policy_version(PolicyArn=arn, PolicyDocument=document, SetAsDefault=True)

    def update(
        self,
        req: Request[PolicyParams],
        observed: Observed[PolicyOut, PolicyLive],
        changes: Sequence[FieldChange],
    ) -> PolicyOut:
        iam = req.ctx.aws.client("iam")
        for change in changes:
            if change.path == "document":
                self._new_version(req.ctx, observed.id, req.params.document)
            if change.path == "tags":
                apply_tag_change(
                    change.after,
                    lambda tags: iam.tag_policy(PolicyArn=observed.id, Tags=tags),
                    lambda keys: iam.untag_policy(PolicyArn=observed.id, TagKeys=keys),
                )
        return observed.outputs

    def _tags(self, ctx: Context, arn: str) -> Tags | None:
        iam = ctx.aws.client("iam")
        return _tags_or_none(lambda: iam.list_policy_tags(PolicyArn=arn)["Tags"])

    def find_owned(self, ctx: Context) -> list[Owned]:
        iam = ctx.aws.client("iam")
        prefix = role_prefix(ctx.cluster, ctx.region)
        out = []
        pages = iam.get_paginator("list_policies").paginate(Scope="Local", PathPrefix=POLICY_PATH)
        for page in pages:
            for policy in page["Policies"]:
                if not policy["PolicyName"].startswith(prefix):
                    continue
                arn = policy["Arn"]
                tags = self._tags(ctx, arn)
                if tags is not None and owned_here(
                    policy["PolicyName"], tags, ctx.cluster, ctx.region
                ):
                    out.append(self.owned_item(tags.get(RESOURCE_TAG) or "?", arn))
        return out

    def delete(self, ctx: Context, owned: Owned) -> None:
        iam = ctx.aws.client("iam")
        try:
            # Roles still holding it (ParallelCluster's, when its delete left the role): only
            # our policy is taken off them.
            held = iam.list_entities_for_policy(PolicyArn=owned.id)
            for role in held.get("PolicyRoles", []):
                iam.detach_role_policy(RoleName=role["RoleName"], PolicyArn=owned.id)
            for version in iam.list_policy_versions(PolicyArn=owned.id)["Versions"]:
                if not version["IsDefaultVersion"]:
                    iam.delete_policy_version(PolicyArn=owned.id, VersionId=version["VersionId"])
            iam.delete_policy(PolicyArn=owned.id)
        except NotFound:
            pass
