"""What the person or role running fmctl must be allowed to do in AWS: every API call fmctl
makes, the IAM actions each call needs, and the policy documents that grant exactly those.

Where the list comes from, and how it stays true:

- ``CALLS``, the calls fmctl makes, is what the product's own clients were seen calling in the
  sandbox tiers (``make test``): the emulator logs each call with the User-Agent's product
  token (``drivers.aws.Aws.agent``), and every scenario and reliability test fails on a call
  this table does not hold (tests/tools/permissions.py). Calls no sandbox test reaches (the
  Cost Explorer query of `fmctl cost`, `validate --online`'s key-pair look, a failed `check`'s
  cancel) were added from the source, and a test fails on any client method of the product
  whose operation is missing here (tests/catalog/test_permissions.py).
- The IAM action of a call is ``prefix:Operation`` unless ``ACTIONS`` says otherwise. Those
  rows come from the "API operations" tables of the Service Authorization Reference
  (https://docs.aws.amazon.com/service-authorization/latest/reference/), per service: S3
  (list_amazons3), AWS Budgets (list_awsbudgetservice), Resource Groups Tagging (prefix tag),
  Service Quotas (prefix servicequotas), STS (GetCallerIdentity needs no permission: the STS
  API reference).
- ``ALSO`` holds what a call needs beyond its own action, each row with its source: PCS's
  "Minimum permissions for AWS PCS" page, the Service Authorization Reference's dependent
  actions (iam:PassRole where a call hands a role to a service, the tag actions of a create
  that tags), eksctl's minimum IAM policies for the EKS service-linked roles, and AWS's
  AmazonFSxFullAccess managed policy (v13) for FSx's.

Not listed: ParallelCluster's own calls. For a Slurm cluster on ParallelCluster, fmctl runs
`pcluster`, whose calls are ParallelCluster's; its documented user policies
(https://docs.aws.amazon.com/parallelcluster/latest/ug/iam-roles-in-parallelcluster-v3.html)
grant them. The Kubernetes API of an EKS cluster answers to the cluster's access entries, not
IAM: fmctl creates the cluster with its creator as administrator.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

#: botocore service -> the operations fmctl's own clients call (see the module docstring).
CALLS: dict[str, str] = {
    "autoscaling": "CreateOrUpdateTags DeleteTags DescribeAutoScalingGroups "
    "TerminateInstanceInAutoScalingGroup",
    "budgets": "CreateBudget CreateNotification CreateSubscriber DeleteBudget "
    "DeleteNotification DeleteSubscriber DescribeBudget DescribeBudgets "
    "DescribeNotificationsForBudget DescribeSubscribersForNotification ListTagsForResource "
    "TagResource UntagResource UpdateBudget",
    "ce": "GetCostAndUsage ListCostAllocationTags",
    "cloudformation": "DescribeStacks",
    "ec2": "AllocateAddress AssociateRouteTable AttachInternetGateway "
    "AuthorizeSecurityGroupEgress AuthorizeSecurityGroupIngress CreateInternetGateway "
    "CreateLaunchTemplate CreateLaunchTemplateVersion CreateNatGateway CreatePlacementGroup "
    "CreateRoute CreateRouteTable CreateSecurityGroup CreateSubnet CreateTags CreateVpc "
    "CreateVpcEndpoint DeleteInternetGateway DeleteLaunchTemplate DeleteNatGateway "
    "DeleteNetworkInterface DeletePlacementGroup DeleteRouteTable DeleteSecurityGroup "
    "DeleteSubnet DeleteTags DeleteVpc DeleteVpcEndpoints DescribeAddresses "
    "DescribeAvailabilityZones DescribeCapacityReservationTopology "
    "DescribeCapacityReservations DescribeImages DescribeInstanceTopology "
    "DescribeInstanceTypeOfferings DescribeInstances DescribeInternetGateways "
    "DescribeKeyPairs DescribeLaunchTemplateVersions DescribeLaunchTemplates "
    "DescribeNatGateways DescribeNetworkInterfaces DescribePlacementGroups "
    "DescribeRouteTables DescribeSecurityGroups DescribeSpotPriceHistory DescribeSubnets "
    "DescribeVpcAttribute DescribeVpcEndpoints DescribeVpcs DetachInternetGateway "
    "DisassociateRouteTable ModifyLaunchTemplate ModifySubnetAttribute ModifyVpcAttribute "
    "ModifyVpcEndpoint ReleaseAddress RevokeSecurityGroupEgress RevokeSecurityGroupIngress "
    "TerminateInstances",
    "eks": "AssociateAccessPolicy CreateAccessEntry CreateAddon CreateCluster CreateNodegroup "
    "CreatePodIdentityAssociation DeleteAccessEntry DeleteAddon DeleteCluster DeleteNodegroup "
    "DeletePodIdentityAssociation DescribeAccessEntry DescribeAddon DescribeAddonVersions "
    "DescribeCluster DescribeNodegroup DescribePodIdentityAssociation DescribeUpdate "
    "DisassociateAccessPolicy ListAccessEntries ListAddons ListAssociatedAccessPolicies "
    "ListClusters ListNodegroups ListPodIdentityAssociations TagResource UntagResource "
    "UpdateAddon UpdateClusterConfig UpdateClusterVersion UpdateNodegroupConfig "
    "UpdateNodegroupVersion UpdatePodIdentityAssociation",
    "events": "DeleteRule DescribeRule ListRules ListTagsForResource ListTargetsByRule PutRule "
    "PutTargets RemoveTargets TagResource UntagResource",
    "fsx": "CreateDataRepositoryAssociation CreateFileSystem DeleteDataRepositoryAssociation "
    "DeleteFileSystem DescribeDataRepositoryAssociations DescribeFileSystems TagResource "
    "UntagResource UpdateDataRepositoryAssociation UpdateFileSystem",
    "iam": "AddRoleToInstanceProfile AttachRolePolicy CreateInstanceProfile CreatePolicy "
    "CreatePolicyVersion CreateRole DeleteInstanceProfile DeletePolicy DeletePolicyVersion "
    "DeleteRole DeleteRolePolicy DetachRolePolicy GetInstanceProfile GetPolicy "
    "GetPolicyVersion GetRole GetRolePolicy ListAttachedRolePolicies ListEntitiesForPolicy "
    "ListInstanceProfiles ListInstanceProfilesForRole ListPolicies ListPolicyTags "
    "ListPolicyVersions ListRolePolicies ListRoleTags ListRoles PutRolePolicy "
    "RemoveRoleFromInstanceProfile TagInstanceProfile TagPolicy TagRole UntagInstanceProfile "
    "UntagPolicy UntagRole UpdateAssumeRolePolicy",
    "kms": "CreateKey DescribeKey EnableKeyRotation GetKeyPolicy GetKeyRotationStatus "
    "PutKeyPolicy ScheduleKeyDeletion TagResource UntagResource",
    "lambda": "AddPermission CreateFunction DeleteFunction GetFunction "
    "GetFunctionConfiguration ListFunctions ListTags TagResource UntagResource "
    "UpdateFunctionCode UpdateFunctionConfiguration",
    "logs": "CreateLogGroup DeleteLogGroup DescribeLogGroups DescribeLogStreams "
    "FilterLogEvents GetLogEvents ListTagsForResource ListTagsLogGroup PutRetentionPolicy "
    "TagResource UntagResource",
    "pcs": "CreateCluster CreateComputeNodeGroup CreateQueue DeleteCluster "
    "DeleteComputeNodeGroup DeleteQueue GetCluster GetComputeNodeGroup GetQueue ListClusters "
    "ListComputeNodeGroups ListQueues ListTagsForResource TagResource UntagResource "
    "UpdateCluster UpdateComputeNodeGroup UpdateQueue",
    "pricing": "GetProducts",
    "resourcegroupstaggingapi": "GetResources",
    "s3": "CreateBucket DeleteBucket DeleteObject DeleteObjects GetBucketEncryption "
    "GetBucketLocation GetBucketPolicy GetBucketTagging GetBucketVersioning GetObject "
    "GetPublicAccessBlock HeadBucket HeadObject ListBuckets ListObjectVersions ListObjectsV2 "
    "PutBucketEncryption PutBucketLifecycleConfiguration PutBucketPolicy PutBucketTagging "
    "PutBucketVersioning PutObject PutPublicAccessBlock",
    "scheduler": "CreateSchedule CreateScheduleGroup DeleteSchedule DeleteScheduleGroup "
    "GetSchedule GetScheduleGroup ListScheduleGroups ListSchedules ListTagsForResource "
    "TagResource UntagResource UpdateSchedule",
    "service-quotas": "GetServiceQuota",
    "sns": "CreateTopic DeleteTopic GetTopicAttributes ListSubscriptions ListTagsForResource "
    "ListTopics SetTopicAttributes Subscribe TagResource Unsubscribe UntagResource",
    "ssm": "CancelCommand GetCommandInvocation SendCommand",
    "sts": "GetCallerIdentity",
}

#: botocore's service name -> IAM's service prefix, where they differ.
PREFIX = {"resourcegroupstaggingapi": "tag", "service-quotas": "servicequotas"}

_SAR = "https://docs.aws.amazon.com/service-authorization/latest/reference/"

#: "service:Operation" -> the IAM actions it is authorized by, where not its own name.
ACTIONS: dict[str, tuple[str, ...]] = {
    # S3 (SAR list_amazons3, "API operations defined by Amazon S3").
    "s3:DeleteObjects": ("s3:DeleteObject", "s3:DeleteObjectVersion"),  # with VersionId
    "s3:GetBucketEncryption": ("s3:GetEncryptionConfiguration",),
    "s3:GetPublicAccessBlock": ("s3:GetBucketPublicAccessBlock",),
    "s3:HeadBucket": ("s3:ListBucket",),
    "s3:HeadObject": ("s3:GetObject",),
    "s3:ListBuckets": ("s3:ListAllMyBuckets",),
    "s3:ListObjectVersions": ("s3:ListBucketVersions",),
    "s3:ListObjectsV2": ("s3:ListBucket",),
    "s3:PutBucketEncryption": ("s3:PutEncryptionConfiguration",),
    "s3:PutBucketLifecycleConfiguration": ("s3:PutLifecycleConfiguration",),
    "s3:PutPublicAccessBlock": ("s3:PutBucketPublicAccessBlock",),
    # AWS Budgets (SAR list_awsbudgetservice): a budget, its notifications and subscribers
    # are changed by budgets:ModifyBudget and read by budgets:ViewBudget.
    "budgets:CreateBudget": ("budgets:ModifyBudget", "budgets:TagResource"),
    "budgets:CreateNotification": ("budgets:ModifyBudget",),
    "budgets:CreateSubscriber": ("budgets:ModifyBudget",),
    "budgets:DeleteBudget": ("budgets:ModifyBudget",),
    "budgets:DeleteNotification": ("budgets:ModifyBudget",),
    "budgets:DeleteSubscriber": ("budgets:ModifyBudget",),
    "budgets:UpdateBudget": ("budgets:ModifyBudget",),
    "budgets:DescribeBudget": ("budgets:ViewBudget",),
    "budgets:DescribeBudgets": ("budgets:ViewBudget",),
    "budgets:DescribeNotificationsForBudget": ("budgets:ViewBudget",),
    "budgets:DescribeSubscribersForNotification": ("budgets:ViewBudget",),
    # STS API reference, GetCallerIdentity: "No permissions are required".
    "sts:GetCallerIdentity": (),
}


@dataclass(frozen=True)
class Also:
    """IAM actions a call needs besides its own, and where AWS says so."""

    call: str
    actions: tuple[str, ...]
    source: str


_PCS = "https://docs.aws.amazon.com/pcs/latest/userguide/security-min-permissions.html"
_PCS_NODES = (
    "ec2:DescribeVpcs",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeLaunchTemplates",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:RunInstances",
    "ec2:CreateFleet",
    "ec2:CreateTags",
    "iam:PassRole",
    "iam:GetInstanceProfile",
    # "Minimum permissions to use Capacity Blocks" (a group on a reservation).
    "ec2:DescribeCapacityReservations",
)
_SCHEDULER = _SAR + "list_amazoneventbridgescheduler.html"
_EKSCTL = "eksctl userdocs/src/usage/minimum-iam-policies.md (IamLimitedAccess)"

ALSO: tuple[Also, ...] = (
    Also(
        "pcs:CreateCluster",
        (
            "ec2:CreateNetworkInterface",
            "ec2:DescribeVpcs",
            "ec2:DescribeSubnets",
            "ec2:DescribeSecurityGroups",
            "ec2:GetSecurityGroupsForVpc",
            "iam:CreateServiceLinkedRole",
            "secretsmanager:CreateSecret",
            "secretsmanager:TagResource",
            "secretsmanager:RotateSecret",
        ),
        _PCS,
    ),
    Also("pcs:CreateComputeNodeGroup", _PCS_NODES, _PCS),
    Also("pcs:UpdateComputeNodeGroup", _PCS_NODES, _PCS),
    Also("eks:CreateCluster", ("iam:PassRole", "iam:CreateServiceLinkedRole"), _EKSCTL),
    Also("eks:CreateNodegroup", ("iam:PassRole", "iam:CreateServiceLinkedRole"), _EKSCTL),
    Also("eks:CreateAddon", ("iam:PassRole",), _SAR + "list_amazonelastickubernetesservice.html"),
    Also("eks:UpdateAddon", ("iam:PassRole",), _SAR + "list_amazonelastickubernetesservice.html"),
    Also(
        "eks:CreatePodIdentityAssociation",
        ("iam:PassRole", "iam:GetRole"),
        _SAR + "list_amazonelastickubernetesservice.html",
    ),
    Also(
        "eks:UpdatePodIdentityAssociation",
        ("iam:PassRole", "iam:GetRole"),
        _SAR + "list_amazonelastickubernetesservice.html",
    ),
    Also(
        "fsx:CreateFileSystem",
        ("iam:CreateServiceLinkedRole",),
        "AWS managed policy AmazonFSxFullAccess v13 (CreateSLRForFSx)",
    ),
    Also(
        "fsx:CreateDataRepositoryAssociation",
        ("iam:CreateServiceLinkedRole",),
        "AWS managed policy AmazonFSxFullAccess v13 (CreateSLRForLustreS3Integration)",
    ),
    Also(
        "lambda:CreateFunction",
        ("iam:PassRole", "lambda:TagResource"),
        _SAR + "list_awslambda.html",
    ),
    Also("scheduler:CreateSchedule", ("iam:PassRole",), _SCHEDULER),
    Also("scheduler:UpdateSchedule", ("iam:PassRole",), _SCHEDULER),
    Also("events:PutTargets", ("iam:PassRole",), _SAR + "list_amazoneventbridge.html"),
    Also(
        "sns:CreateTopic",
        ("sns:TagResource",),
        "SNS API reference, CreateTopic: tagging at creation needs sns:TagResource",
    ),
)

#: The services whose service-linked roles a first `up` in an account may create, and who
#: says the caller creates them: eksctl's minimum policies (EKS, its node groups, Auto
#: Scaling behind a node group), AmazonFSxFullAccess (FSx, its S3 link), PCS's minimum
#: permissions page (CreateCluster needs iam:CreateServiceLinkedRole; the role is
#: AWSServiceRoleForPCS, the PCS user guide's "Service-linked roles for AWS PCS").
SERVICE_LINKED = (
    "autoscaling.amazonaws.com",
    "eks.amazonaws.com",
    "eks-nodegroup.amazonaws.com",
    "fsx.amazonaws.com",
    "s3.data-source.lustre.fsx.amazonaws.com",
    "pcs.amazonaws.com",
)

#: The service each role fmctl hands over is passed to (``iam:PassedToService``), by call,
#: and where AWS says so: iam:PassRole on fmctl's roles holds only for these, so the caller
#: cannot hand an fmctl role to another service (a build or notebook service running code
#: as it). PCS's node roles (path /aws-pcs/) are passed with their instance profile, and
#: PCS's minimum permissions name iam:PassRole without the service: not conditioned.
PASSED_TO: dict[str, tuple[str, str]] = {
    "eks:CreateCluster": (
        "eks.amazonaws.com",
        "Step Functions developer guide, IAM policies for Amazon EKS (CreateCluster)",
    ),
    "eks:CreateNodegroup": (
        "eks.amazonaws.com",
        "Step Functions developer guide, IAM policies for Amazon EKS (CreateNodeGroup)",
    ),
    "eks:CreatePodIdentityAssociation": (
        "pods.eks.amazonaws.com",
        "EMR on EKS development guide, Enable EKS Pod Identity on the EKS cluster (the "
        "association's creator's iam:PassRole)",
    ),
    "eks:UpdatePodIdentityAssociation": (
        "pods.eks.amazonaws.com",
        "as CreatePodIdentityAssociation: the same role parameter",
    ),
    # An add-on's podIdentityAssociations are EKS Pod Identity associations the add-on makes
    # "in a single API call" (EKS user guide, IAM roles for Amazon EKS add-ons): their roles
    # go where CreatePodIdentityAssociation's do (inferred; no page names the key here).
    "eks:CreateAddon": (
        "pods.eks.amazonaws.com",
        "EKS user guide, IAM roles for Amazon EKS add-ons (as CreatePodIdentityAssociation)",
    ),
    "eks:UpdateAddon": (
        "pods.eks.amazonaws.com",
        "EKS user guide, IAM roles for Amazon EKS add-ons (as CreatePodIdentityAssociation)",
    ),
    "lambda:CreateFunction": ("lambda.amazonaws.com", "AWS managed policy AWSLambda_FullAccess v2"),
    "scheduler:CreateSchedule": (
        "scheduler.amazonaws.com",
        "AWS managed policy AmazonEventBridgeSchedulerFullAccess v4",
    ),
    "scheduler:UpdateSchedule": (
        "scheduler.amazonaws.com",
        "AWS managed policy AmazonEventBridgeSchedulerFullAccess v4",
    ),
    "events:PutTargets": (
        "events.amazonaws.com",
        "AWS managed policy AmazonEventBridgeFullAccess v7",
    ),
}

#: What fmctl names its IAM resources (``resources.iam``: roles and instance profiles
#: ``fmctl-CLUSTER-REGION-ROLE``, at path / or PCS's /aws-pcs/; customer-managed policies
#: under /parallelcluster/), so that IAM writes and iam:PassRole reach nothing else.
OWN_IAM = (
    "arn:*:iam::*:role/fmctl-*",
    "arn:*:iam::*:role/aws-pcs/fmctl-*",
    "arn:*:iam::*:instance-profile/fmctl-*",
    "arn:*:iam::*:instance-profile/aws-pcs/fmctl-*",
    "arn:*:iam::*:policy/parallelcluster/fmctl-*",
)
#: The AWS-managed policies fmctl attaches to its roles (``blueprint.infra.ROLES``; a test
#: holds the two equal): iam:AttachRolePolicy and DetachRolePolicy are allowed for these
#: only (the iam:PolicyARN condition key), so the caller cannot attach, say, administrator
#: access to a role of fmctl's name.
MANAGED_POLICIES = (
    "AmazonEC2ContainerRegistryReadOnly",
    "AmazonEKSClusterPolicy",
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonSSMManagedInstanceCore",
)
#: IAM reads that name no resource, or read what fmctl is handed (a role a spec names).
IAM_ANY = frozenset(
    {
        "iam:ListRoles",
        "iam:ListPolicies",
        "iam:ListInstanceProfiles",
        "iam:GetRole",
        "iam:GetInstanceProfile",
    }
)
#: A managed policy's size limit, in characters without white space (IAM quotas page).
POLICY_LIMIT = 6144


def prefix(service: str) -> str:
    """IAM's service prefix of a botocore service name."""
    return PREFIX.get(service, service)


def own_actions(service: str, operation: str) -> tuple[str, ...]:
    """The IAM actions that authorize the call itself: its own name, unless ``ACTIONS``
    says otherwise."""
    call = f"{prefix(service)}:{operation}"
    return ACTIONS.get(call, (call,))


def actions_of(service: str, operation: str) -> tuple[str, ...]:
    """The IAM actions one call needs, its own and those ``ALSO`` adds."""
    call = f"{prefix(service)}:{operation}"
    extra = tuple(a for also in ALSO if also.call == call for a in also.actions)
    return own_actions(service, operation) + extra


@functools.cache
def _listed(service: str) -> frozenset[str]:
    return frozenset(CALLS.get(service, "").split())


def covers(service: str, operation: str) -> bool:
    """True when ``CALLS`` lists the call (so its actions are in the policy)."""
    return operation in _listed(service)


def required_actions() -> list[str]:
    """Every IAM action the caller needs, sorted."""
    found = {
        action
        for service, operations in CALLS.items()
        for operation in operations.split()
        for action in actions_of(service, operation)
    }
    return sorted(found)


@dataclass(frozen=True)
class Statement:
    """One statement of the caller's policy."""

    sid: str
    actions: tuple[str, ...]
    resources: tuple[str, ...] = ("*",)
    condition: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    def document(self) -> dict[str, Any]:
        """The statement as IAM's JSON policy grammar spells it."""
        out: dict[str, Any] = {
            "Sid": self.sid,
            "Effect": "Allow",
            "Action": list(self.actions),
            "Resource": list(self.resources) if len(self.resources) > 1 else self.resources[0],
        }
        if self.condition:
            out["Condition"] = {op: {key: list(values)} for op, key, values in self.condition}
        return out


def statements() -> list[Statement]:
    """The caller's permissions as statements: IAM writes and iam:PassRole on fmctl's own
    names only, service-linked roles for the listed services only, the rest by service."""
    actions = required_actions()
    iam = [a for a in actions if a.startswith("iam:")]
    attach = ("iam:AttachRolePolicy", "iam:DetachRolePolicy")
    special = ("iam:PassRole", "iam:CreateServiceLinkedRole", *attach)
    own = tuple(a for a in iam if a not in IAM_ANY and a not in special)
    known = tuple(f"arn:*:iam::aws:policy/{name}" for name in MANAGED_POLICIES)
    out = [
        Statement("FmctlOwnIam", own, OWN_IAM),
        Statement(
            "FmctlAttachKnownPolicies",
            tuple(a for a in attach if a in iam),
            OWN_IAM[:2],
            condition=(("ArnLike", "iam:PolicyARN", known),),
        ),
        Statement(
            "FmctlPassOwnRoles",
            ("iam:PassRole",),
            OWN_IAM[:1],
            condition=(
                (
                    "StringEquals",
                    "iam:PassedToService",
                    tuple(sorted({service for service, _ in PASSED_TO.values()})),
                ),
            ),
        ),
        Statement("FmctlPassPcsNodeRoles", ("iam:PassRole",), OWN_IAM[1:2]),
        Statement(
            "ServiceLinkedRoles",
            ("iam:CreateServiceLinkedRole",),
            condition=(("StringEquals", "iam:AWSServiceName", SERVICE_LINKED),),
        ),
        Statement("IamReads", tuple(sorted(IAM_ANY & set(iam)))),
    ]
    by_prefix: dict[str, list[str]] = {}
    for action in actions:
        if not action.startswith("iam:"):
            by_prefix.setdefault(action.split(":", 1)[0], []).append(action)
    for name, group in sorted(by_prefix.items()):
        sid = "".join(part.capitalize() for part in name.split("-"))
        out.append(Statement(sid, tuple(group)))
    return out


def _size(statement: dict[str, Any]) -> int:
    return len("".join(json.dumps(statement, separators=(",", ":")).split()))


def policies(name: str = "fmctl-caller") -> list[tuple[str, dict[str, Any]]]:
    """The caller's policy documents, each under IAM's managed-policy size limit:
    (``NAME-1``, document), (``NAME-2``, document), ... to attach together."""
    docs: list[list[dict[str, Any]]] = [[]]
    overhead = _size({"Version": "2012-10-17", "Statement": []})
    for statement in (s.document() for s in statements()):
        used = overhead + sum(_size(s) + 1 for s in docs[-1])
        if docs[-1] and used + _size(statement) > POLICY_LIMIT:
            docs.append([])
        docs[-1].append(statement)
    return [
        (f"{name}-{i}", {"Version": "2012-10-17", "Statement": statements_})
        for i, statements_ in enumerate(docs, start=1)
    ]
