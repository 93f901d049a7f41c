"""Values only `fmctl up` learns (ids of what it creates), written as placeholders.

One syntax everywhere: ``<fmctl:NAME>``, e.g. ``<fmctl:privateSubnetId>``. It is a plain
scalar in YAML and a plain string in JSON; it is never a valid AWS id or Kubernetes name, so
a config still holding one fails loudly instead of half-working; and it is not the ``${...}``
of Flux post-build substitution, Helm, Jinja or the shell, so no tool downstream expands it
by accident. `up` fills them with ``fill``; ``find`` lists what a file still needs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

PATTERN = re.compile(r"<fmctl:([A-Za-z][A-Za-z0-9._-]*)>")

#: Every placeholder render may emit, with what fills it (documented in OUT/PLACEHOLDERS.md).
KNOWN: dict[str, str] = {
    "accountId": "the AWS account id of the credentials `up` runs with",
    "vpcCidr": "the CIDR block of the reused VPC (network.vpcId)",
    "privateSubnetId": "the private subnet in the cluster's AZ (created, or network.subnetId)",
    "secondarySubnetId": "a small private subnet in a second AZ (EKS control planes need two)",
    "publicSubnetId": "the public subnet in the cluster's AZ (head node, load balancers)",
    "efaSecurityGroupId": "the EFA security group (all traffic to and from itself)",
    "fsxSecurityGroupId": "the FSx security group (TCP 988 and 1018-1023 from the nodes)",
    "fileSystemId": "the FSx for Lustre file system (created, or storage.fsxLustre.fileSystemId)",
    "fsxDnsName": "the file system's DNS name (DescribeFileSystems DNSName)",
    "fsxMountName": "the file system's Lustre mount name (LustreConfiguration.MountName)",
    "artifactBucket": "the artifact bucket holding the uploaded slurm/ scripts",
    "clusterRoleArn": "the EKS cluster IAM role",
    "nodeRoleArn": "the IAM role of the EKS node groups",
    "ampWritePolicyArn": "fmctl's policy allowing aps:RemoteWrite to the AMP workspace only",
    "gitRepoUrl": "the Git repository GitOps tools read this folder from (set it yourself)",
    "pcsClusterId": "the AWS PCS cluster's id (pcs_...)",
    "pcsClusterSecurityGroupId": "the PCS cluster security group (controller and nodes, all "
    "traffic to and from itself)",
    "sshSecurityGroupId": "the PCS login nodes' SSH security group (port 22 from network.sshCidr)",
    "pcsNodeInstanceProfileArn": "the PCS nodes' instance profile (role path /aws-pcs/)",
}
#: Placeholder families, NAME.KEY (per pool, node group or architecture): what fills one,
#: followed by KEY.
FAMILIES: dict[str, str] = {
    "placementGroup": "the placement group of pool",
    "launchTemplate": "the launch template of pool",
    "launchTemplateVersion": "the launch template version of PCS node group",
    "computeNodeGroupId": "the id of PCS compute node group",
    "pcsAmiId": "AWS's PCS sample AMI (found by name) for the Slurm version, on",
}


def placeholder(name: str) -> str:
    """The placeholder text for ``name`` (must be a known name, or ``placementGroup.POOL``)."""
    if name not in KNOWN and not ("." in name and name.split(".", 1)[0] in FAMILIES):
        raise KeyError(f"unknown placeholder {name!r}")
    return f"<fmctl:{name}>"


def find(text: str) -> set[str]:
    """Names of the placeholders in ``text``."""
    return set(PATTERN.findall(text))


def fill(text: str, values: Mapping[str, str]) -> str:
    """Replace every placeholder; a missing value is an error, never left in silently."""
    missing = find(text) - set(values)
    if missing:
        raise KeyError(f"no value for placeholder(s): {', '.join(sorted(missing))}")
    return PATTERN.sub(lambda m: values[m.group(1)], text)
