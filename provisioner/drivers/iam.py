"""IAM roles (and instance profiles for node roles): least privilege from AWS-managed
policies, named per cluster and region (IAM is global), owned by tag."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from provisioner.drivers.aws import error_code
from provisioner.drivers.ec2_base import is_gone, retry_dependency
from provisioner.plan.context import OWNER_TAG, RESOURCE_TAG, Engine
from provisioner.plan.graph import Found, Node, Outputs

#: What each role may do: trusted service, AWS-managed policies. Nothing broader.
ROLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "eks-cluster": ("eks.amazonaws.com", ("AmazonEKSClusterPolicy",)),
    "eks-node": (
        "ec2.amazonaws.com",
        (
            "AmazonEKSWorkerNodePolicy",
            "AmazonEKS_CNI_Policy",
            "AmazonEC2ContainerRegistryReadOnly",
            "AmazonSSMManagedInstanceCore",
        ),
    ),
    # EKS Pod Identity: the FSx CSI controller's service account (dynamic provisioning);
    # an inline policy scoped to what the driver calls (AmazonFSxFullAccess is far wider).
    "fsx-csi": ("pods.eks.amazonaws.com", ()),
    # Prometheus on EKS remote-writing to Amazon Managed Service for Prometheus; its inline
    # policy names the spec's workspace (``amp_write_policy``).
    "prometheus-amp": ("pods.eks.amazonaws.com", ()),
}
#: Inline policies, by role: named actions only, never "*".
INLINE: dict[str, dict[str, Any]] = {
    "fsx-csi": {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "FileSystems",
                "Effect": "Allow",
                "Action": [
                    "fsx:CreateFileSystem",
                    "fsx:DeleteFileSystem",
                    "fsx:DescribeFileSystems",
                    "fsx:UpdateFileSystem",
                    "fsx:TagResource",
                ],
                "Resource": "*",
            },
            {
                "Sid": "LinkedRoles",
                "Effect": "Allow",
                "Action": ["iam:CreateServiceLinkedRole"],
                "Resource": "*",
                "Condition": {
                    "StringLike": {
                        "iam:AWSServiceName": [
                            "fsx.amazonaws.com",
                            "s3.data-source.lustre.fsx.amazonaws.com",
                        ]
                    }
                },
            },
            {
                "Sid": "LinkedRolePolicies",
                "Effect": "Allow",
                "Action": ["iam:AttachRolePolicy", "iam:PutRolePolicy"],
                "Resource": "arn:aws:iam::*:role/aws-service-role/"
                "s3.data-source.lustre.fsx.amazonaws.com/*",
            },
        ],
    }
}


def amp_write_policy(workspace_arn: str) -> dict[str, Any]:
    """aps:RemoteWrite on one workspace: all Prometheus needs to send samples."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "RemoteWrite",
                "Effect": "Allow",
                "Action": ["aps:RemoteWrite"],
                "Resource": workspace_arn,
            }
        ],
    }


#: Pod Identity assumes roles with session tags.
TAG_SESSION_SERVICES = ("pods.eks.amazonaws.com",)


def role_name(cluster: str, region: str, role: str) -> str:
    """Stable and unique per cluster and region (IAM names are global to the account)."""
    return f"fmctl-{cluster}-{region}-{role}"[:64]


def _tags_or_none(read: Callable[[], list[dict[str, str]]]) -> dict[str, str] | None:
    """Tags read by ``read`` as a dict, or None when the entity does not exist."""
    try:
        tags = read()
    except Exception as exc:
        if error_code(exc) == "NoSuchEntity":
            return None
        raise
    return {t["Key"]: t["Value"] for t in tags}


def _claim(tags: dict[str, str] | None, what: str, cluster: str) -> bool:
    """True when ``what`` exists and is ``cluster``'s; False when it does not exist; raises
    when it is someone else's (fmctl never takes over what it did not make)."""
    if tags is None:
        return False
    if tags.get(OWNER_TAG) != cluster:
        raise RuntimeError(
            f"{what} exists and is not owned by fmctl cluster {cluster}; fmctl will not take "
            "it over"
        )
    return True


class Role:
    """An IAM role for the cluster, with an instance profile when EC2 assumes it."""

    name = "iam-role"
    after: tuple[str, ...] = ()
    create_seconds, delete_seconds = 3.0, 3.0

    def _name(self, engine: Engine, node: Node) -> str:
        return role_name(engine.cluster, engine.region, node.params["role"])

    def _tags(self, engine: Engine, name: str) -> dict[str, str] | None:
        """The role's tags (None when there is no such role)."""
        iam = engine.aws.client("iam")
        return _tags_or_none(lambda: iam.list_role_tags(RoleName=name)["Tags"])

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        name = self._name(engine, node)
        if not _claim(self._tags(engine, name), f"IAM role {name}", engine.cluster):
            return None
        self._complete(engine, node, name)  # a crash may have left it half-made
        return self._outputs(engine, name)

    def _outputs(self, engine: Engine, name: str) -> Outputs:
        role = engine.aws.client("iam").get_role(RoleName=name)["Role"]
        return {"id": name, "arn": role["Arn"]}

    def create(self, engine: Engine, node: Node) -> Outputs:
        iam = engine.aws.client("iam")
        name = self._name(engine, node)
        service, _ = ROLES[node.params["role"]]
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": service},
                    "Action": ["sts:AssumeRole", "sts:TagSession"]
                    if service in TAG_SESSION_SERVICES
                    else "sts:AssumeRole",
                }
            ],
        }
        try:
            iam.create_role(
                RoleName=name,
                AssumeRolePolicyDocument=json.dumps(trust),
                Description=f"fmctl {engine.cluster} ({engine.region}): {node.params['role']}",
                Tags=engine.tag_list(node.id),
                MaxSessionDuration=3600,
            )
        except Exception as exc:
            if error_code(exc) != "EntityAlreadyExists":
                raise
            # Lost tags (or none) are not ours either.
            _claim(self._tags(engine, name) or {}, f"IAM role {name}", engine.cluster)
        self._complete(engine, node, name)
        return self._outputs(engine, name)

    def _complete(self, engine: Engine, node: Node, name: str) -> None:
        iam = engine.aws.client("iam")
        service, policies = ROLES[node.params["role"]]
        attached = {
            p["PolicyName"]
            for p in iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"]
        }
        for policy in policies:
            if policy not in attached:
                iam.attach_role_policy(RoleName=name, PolicyArn=f"arn:aws:iam::aws:policy/{policy}")
        # The plan's policy for this role when it depends on the spec, else the fixed one.
        inline = node.params.get("inline") or INLINE.get(node.params["role"])
        if inline is not None:  # put again on every `up`: restores a policy edited by hand
            iam.put_role_policy(
                RoleName=name,
                PolicyName=f"fmctl-{node.params['role']}",
                PolicyDocument=json.dumps(inline),
            )
        if service == "ec2.amazonaws.com":
            try:
                profile = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
            except Exception as exc:
                if error_code(exc) != "NoSuchEntity":
                    raise
                profile = iam.create_instance_profile(
                    InstanceProfileName=name, Tags=engine.tag_list(node.id)
                )["InstanceProfile"]
            if not any(r["RoleName"] == name for r in profile["Roles"]):
                iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        return outputs

    def find_all(self, engine: Engine) -> list[Found]:
        out = []
        for role in ROLES:
            name = role_name(engine.cluster, engine.region, role)
            tags = self._tags(engine, name) or self._profile_tags(engine, name)
            if tags is not None and tags.get(OWNER_TAG) == engine.cluster:
                out.append(Found(self.name, tags.get(RESOURCE_TAG, f"iam/{role}"), name))
        return out

    def _profile_tags(self, engine: Engine, name: str) -> dict[str, str] | None:
        """The tags of the instance profile of that name (None when there is none)."""
        iam = engine.aws.client("iam")
        # GetInstanceProfile carries the tags (moto lacks ListInstanceProfileTags).
        return _tags_or_none(
            lambda: iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"].get(
                "Tags", []
            )
        )

    def _delete_profile(self, engine: Engine, name: str) -> None:
        """Our instance profile, looked up by name and not through the role: a run stopped
        between taking the role out of it and deleting it leaves it holding no role, where
        listing the role's profiles no longer finds it."""
        if (self._profile_tags(engine, name) or {}).get(OWNER_TAG) != engine.cluster:
            return
        iam = engine.aws.client("iam")
        try:
            profile = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
            for role in profile["Roles"]:
                iam.remove_role_from_instance_profile(
                    InstanceProfileName=name, RoleName=role["RoleName"]
                )
            iam.delete_instance_profile(InstanceProfileName=name)
        except Exception as exc:
            if not is_gone(exc):
                raise

    def delete(self, engine: Engine, found: Found) -> None:
        iam = engine.aws.client("iam")
        self._delete_profile(engine, found.id)
        try:
            # Profiles of other names holding our role: take the role out, leave them be.
            profiles = iam.list_instance_profiles_for_role(RoleName=found.id)["InstanceProfiles"]
            for profile in profiles:
                iam.remove_role_from_instance_profile(
                    InstanceProfileName=profile["InstanceProfileName"], RoleName=found.id
                )
            for policy in iam.list_attached_role_policies(RoleName=found.id)["AttachedPolicies"]:
                iam.detach_role_policy(RoleName=found.id, PolicyArn=policy["PolicyArn"])
            for inline in iam.list_role_policies(RoleName=found.id)["PolicyNames"]:
                iam.delete_role_policy(RoleName=found.id, PolicyName=inline)
        except Exception as exc:
            if is_gone(exc):
                return
            raise
        retry_dependency(functools.partial(iam.delete_role, RoleName=found.id), found.id, engine)


#: Where fmctl's customer-managed policies live in IAM (their ARNs carry it). ParallelCluster's
#: documented least-privilege user policy lets `pcluster` attach customer policies under
#: policy/parallelcluster* only (and a short list of AWS-managed ones, AMP's not among them).
POLICY_PATH = "/parallelcluster/"
#: Customer-managed policies a plan may hold, by the node's "policy" param. ParallelCluster's
#: AdditionalIamPolicies takes policy ARNs only: a statement scoped to one resource has to be
#: a policy of its own (AWS-managed ones grant the action on every resource of the account).
POLICIES = ("amp-write",)


class ManagedPolicy:
    """A customer-managed IAM policy for the cluster, named per cluster and region; its
    document is the node's ``document`` param, made the default version again on every `up`
    when it changed (a new workspace, a policy edited by hand)."""

    name = "iam-policy"
    after: tuple[str, ...] = ()
    create_seconds, delete_seconds = 2.0, 2.0

    def _arn(self, engine: Engine, policy: str) -> str:
        from provisioner.render.images import partition

        name = role_name(engine.cluster, engine.region, policy)
        account = engine.aws.account_id()
        return f"arn:{partition(engine.region)}:iam::{account}:policy{POLICY_PATH}{name}"

    def _tags(self, engine: Engine, arn: str) -> dict[str, str] | None:
        iam = engine.aws.client("iam")
        return _tags_or_none(lambda: iam.list_policy_tags(PolicyArn=arn)["Tags"])

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        arn = self._arn(engine, node.params["policy"])
        if not _claim(self._tags(engine, arn), f"IAM policy {arn}", engine.cluster):
            return None
        self._converge(engine, arn, node.params["document"])
        return {"id": arn, "arn": arn}

    def create(self, engine: Engine, node: Node) -> Outputs:
        iam = engine.aws.client("iam")
        policy = node.params["policy"]
        arn = self._arn(engine, policy)
        try:
            iam.create_policy(
                PolicyName=role_name(engine.cluster, engine.region, policy),
                Path=POLICY_PATH,
                PolicyDocument=json.dumps(node.params["document"]),
                Description=f"fmctl {engine.cluster} ({engine.region}): {policy}",
                Tags=engine.tag_list(node.id),
            )
        except Exception as exc:
            if error_code(exc) != "EntityAlreadyExists":
                raise
            _claim(self._tags(engine, arn) or {}, f"IAM policy {arn}", engine.cluster)
            self._converge(engine, arn, node.params["document"])
        return {"id": arn, "arn": arn}

    def _converge(self, engine: Engine, arn: str, document: dict[str, Any]) -> None:
        """Make ``document`` the default version, keeping at most IAM's five versions."""
        iam = engine.aws.client("iam")
        default = iam.get_policy(PolicyArn=arn)["Policy"]["DefaultVersionId"]
        live = iam.get_policy_version(PolicyArn=arn, VersionId=default)["PolicyVersion"]
        current = live["Document"]
        if isinstance(current, str):  # URL-encoded JSON where the SDK did not decode it
            from urllib.parse import unquote

            current = json.loads(unquote(current))
        if current == document:
            return
        versions = iam.list_policy_versions(PolicyArn=arn)["Versions"]
        old = sorted(
            (v for v in versions if not v["IsDefaultVersion"]), key=lambda v: v["CreateDate"]
        )
        if len(versions) >= 5 and old:
            iam.delete_policy_version(PolicyArn=arn, VersionId=old[0]["VersionId"])
        iam.create_policy_version(
            PolicyArn=arn, PolicyDocument=json.dumps(document), SetAsDefault=True
        )

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        return outputs

    def find_all(self, engine: Engine) -> list[Found]:
        out = []
        for policy in POLICIES:
            arn = self._arn(engine, policy)
            tags = self._tags(engine, arn)
            if tags is not None and tags.get(OWNER_TAG) == engine.cluster:
                out.append(Found(self.name, tags.get(RESOURCE_TAG, f"iam/{policy}"), arn))
        return out

    def delete(self, engine: Engine, found: Found) -> None:
        iam = engine.aws.client("iam")
        try:
            # Roles still holding it (ParallelCluster's, when its delete left the role): only
            # our policy is taken off them.
            held = iam.list_entities_for_policy(PolicyArn=found.id)
            for role in held.get("PolicyRoles", []):
                iam.detach_role_policy(RoleName=role["RoleName"], PolicyArn=found.id)
            for version in iam.list_policy_versions(PolicyArn=found.id)["Versions"]:
                if not version["IsDefaultVersion"]:
                    iam.delete_policy_version(PolicyArn=found.id, VersionId=version["VersionId"])
            iam.delete_policy(PolicyArn=found.id)
        except Exception as exc:
            if not is_gone(exc):
                raise
