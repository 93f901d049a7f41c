"""Facts about AWS Parallel Computing Service (PCS) that fmctl builds on, each with its source.

- Names, sizes and statuses: botocore's ``pcs`` service model (``data/pcs/2023-02-10``):
  ``ClusterName`` 3-40 and ``ComputeNodeGroupName``/``QueueName`` 3-25 characters of pattern
  ``(?!pcs_)^[A-Za-z][A-Za-z0-9-]+``; the ``Size`` documentation (SMALL: 32 compute nodes and
  256 jobs, MEDIUM: 512 and 8,192, LARGE: 2,048 and 16,384).
- One cluster ``Creating`` per region and account: the CreateCluster API reference ("fails
  with a ServiceQuotaExceededException if there is already a cluster in a Creating state").
- Slurm versions and sample AMIs: the AWS PCS User Guide, "AWS PCS sample AMIs release
  notes" (``aws-pcs-sample_ami-amzn2-{x86_64,arm64}-slurm-VERSION`` for 24.11 and 25.05,
  ``aws-pcs-sample_ami-al2023-...-slurm-25.11``); Slurm is installed under
  ``/opt/aws/pcs/scheduler/slurm-VERSION`` ("Install SPANK plugins on AWS PCS"), runs
  configless, with the configuration a node runs at ``/run/slurm/conf/slurm.conf``
  ("Slurm configuration in AWS PCS").
- Instance profiles: the role's name starts with ``AWSPCS`` or its path is ``/aws-pcs/``,
  and it may call ``pcs:RegisterComputeNodeGroupInstance`` (API reference,
  ``ComputeNodeGroup.iamInstanceProfileArn``; "Create an instance profile for AWS PCS").
- Instances a node group launches carry ``aws:pcs:compute-node-group-id`` and
  ``aws:pcs:cluster-id`` ("Find compute node group instances in AWS PCS").
- The cluster security group: all traffic to and from itself, and out to anywhere (the AWS
  HPC recipes' ``pcs/getting_started/assets/pcs-cluster-sg.yaml``).
- Regions: the AWS General Reference, "AWS Parallel Computing Service endpoints and quotas"
  (read 2026-12; the list grows, so a region missing here is a warning, and `up` asks PCS).
"""

from __future__ import annotations

import re

CLUSTER_NAME_RE = re.compile(r"^(?!pcs_)[A-Za-z][A-Za-z0-9-]{2,39}$")
NODE_GROUP_NAME_RE = re.compile(r"^(?!pcs_)[A-Za-z][A-Za-z0-9-]{2,24}$")

#: Compute nodes per controller size.
SIZE_NODES: dict[str, int] = {"SMALL": 32, "MEDIUM": 512, "LARGE": 2048}

#: Slurm major versions with a supported PCS sample AMI, oldest first.
SLURM_VERSIONS: tuple[str, ...] = ("24.11", "25.05", "25.11")

#: The sample AMI's OS per Slurm version (Amazon Linux 2 until 25.11, then 2023).
_SAMPLE_OS = {"24.11": "amzn2", "25.05": "amzn2", "25.11": "al2023"}

#: Amazon's images (the owner alias DescribeImages filters on).
SAMPLE_AMI_OWNER = "amazon"

#: Where the PCS Slurm installer puts a version.
SLURM_PREFIX = "/opt/aws/pcs/scheduler/slurm-{version}"

#: The tags PCS puts on the instances it launches.
NODE_GROUP_TAG = "aws:pcs:compute-node-group-id"
CLUSTER_TAG = "aws:pcs:cluster-id"

#: IAM path PCS accepts for the nodes' role (names may instead start with AWSPCS).
ROLE_PATH = "/aws-pcs/"

#: Cluster-level slurm.conf settings fmctl sets itself (why, for the error).
FMCTL_SETTINGS: dict[str, str] = {
    "Prolog": "its node check runs before every job",
    "Epilog": "its cleanup runs after every job",
}

PCS_REGIONS: tuple[str, ...] = (
    "us-east-1",
    "us-east-2",
    "us-west-2",
    "us-gov-east-1",
    "us-gov-west-1",
    "af-south-1",
    "ap-south-1",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "ap-southeast-6",
    "eu-central-1",
    "eu-north-1",
    "eu-west-1",
    "eu-west-2",
)


def sample_ami_name(version: str, architecture: str) -> str:
    """The name of AWS's PCS sample AMI for a Slurm version and architecture."""
    return f"aws-pcs-sample_ami-{_SAMPLE_OS[version]}-{architecture}-slurm-{version}"


def slurm_prefix(version: str) -> str:
    """Where Slurm lives on a PCS AMI."""
    return SLURM_PREFIX.format(version=version)
