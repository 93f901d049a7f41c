"""Facts about AWS Parallel Computing Service (PCS) that fmctl builds on, each with its source.

- Names, sizes and statuses: botocore's ``pcs`` service model (``data/pcs/2023-02-10``):
  ``ClusterName`` 3-40 and ``ComputeNodeGroupName``/``QueueName`` 3-25 characters of pattern
  ``(?!pcs_)^[A-Za-z][A-Za-z0-9-]+``; the ``Size`` documentation (SMALL: 32 compute nodes and
  256 jobs, MEDIUM: 512 and 8,192, LARGE: 2,048 and 16,384).
- One cluster ``Creating`` per region and account: the CreateCluster API reference ("fails
  with a ServiceQuotaExceededException if there is already a cluster in a Creating state").
- Slurm versions and sample AMIs: ``SLURM_RELEASES`` below (each row says where it comes
  from); Slurm is installed under
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
from dataclasses import dataclass
from datetime import date, timedelta

CLUSTER_NAME_RE = re.compile(r"^(?!pcs_)[A-Za-z][A-Za-z0-9-]{2,39}$")
NODE_GROUP_NAME_RE = re.compile(r"^(?!pcs_)[A-Za-z][A-Za-z0-9-]{2,24}$")

#: Compute nodes per controller size.
SIZE_NODES: dict[str, int] = {"SMALL": 32, "MEDIUM": 512, "LARGE": 2048}


@dataclass(frozen=True)
class SlurmRelease:
    """One Slurm major version on PCS: its dates (None: not recorded) and AWS's sample AMI.

    ``end_of_life`` is the day after which PCS creates no new cluster on the version; a
    cluster already on it keeps running and may be upgraded in place (UpdateCluster).
    """

    version: str
    released: date | None
    end_of_support: date | None
    end_of_life: date | None
    #: The sample AMI's OS part of its name (None: AWS publishes no sample AMI for it).
    sample_os: str | None
    #: The NVIDIA driver on the x86_64 sample AMI (its release notes), None: not recorded.
    sample_driver: str | None
    source: str

    def life(self, today: date) -> str:
        """``ended`` (past end of life), ``ending`` (within EOL_WARNING_DAYS) or ``live``."""
        if self.end_of_life is None or today <= self.end_of_life - EOL_WARNING:
            return "live"
        return "ended" if today > self.end_of_life else "ending"

    def driver_major(self) -> int | None:
        """The sample AMI's NVIDIA driver branch (550, 590), or None."""
        return int(self.sample_driver.split(".")[0]) if self.sample_driver else None


#: A version this close to its end of life is a warning.
EOL_WARNING = timedelta(days=90)

_VERSIONS_PAGE = 'AWS PCS User Guide, "Slurm versions in AWS PCS"'
_AMI_NOTES = 'AWS PCS User Guide, "AWS PCS sample AMIs release notes" (x86_64, read 2026-12)'
_BOTOCORE = "botocore 1.44.8 pcs model: SchedulerRequest/UpdateSchedulerRequest valid values"

#: The Slurm versions CreateCluster takes (botocore 1.44.8 lists 24.11 | 25.05 | 25.11 |
#: 26.05), oldest first. The end-of-life dates of 24.11 and 25.05 are the versions page's;
#: the later ones were not published when this was written (None: not judged).
SLURM_RELEASES: dict[str, SlurmRelease] = {
    r.version: r
    for r in (
        SlurmRelease(
            "24.11",
            None,
            None,
            date(2026, 5, 31),
            "amzn2",
            "550.127.08",
            f"{_VERSIONS_PAGE} (end of life); {_AMI_NOTES} (AMI, driver)",
        ),
        SlurmRelease(
            "25.05",
            None,
            None,
            date(2026, 11, 30),
            "amzn2",
            "550.127.08",
            f"{_VERSIONS_PAGE} (end of life); {_AMI_NOTES} (AMI, driver)",
        ),
        SlurmRelease(
            "25.11",
            None,
            None,
            None,
            "al2023",
            "590.48.01",
            f"{_AMI_NOTES} (AMI aws-pcs-sample_ami-al2023-x86_64-slurm-25.11, driver)",
        ),
        SlurmRelease(
            "26.05",
            None,
            None,
            None,
            None,
            None,
            f"{_BOTOCORE}; no sample AMI in {_AMI_NOTES}",
        ),
    )
}

#: Slurm major versions PCS takes, oldest first.
SLURM_VERSIONS: tuple[str, ...] = tuple(SLURM_RELEASES)

#: The oldest NVIDIA driver branch Blackwell GPUs (B200, B300, GB200) run on: R570 (NVIDIA's
#: GPU Operator platform support, NVIDIA/cloud-native-docs gpu-operator/platform-support.rst:
#: HGX B200 and GB200 NVL supported from the 570 drivers, B200 "requires 570.133.20 or
#: later"; the 550 branch predates Blackwell).
BLACKWELL_DRIVER_MAJOR = 570
#: The catalog's GPU models of the Blackwell generation.
BLACKWELL_GPUS: tuple[str, ...] = ("B200", "B300", "GB200")


def default_slurm_version(today: date) -> str:
    """The newest version with a sample AMI that is not past its end of life on ``today``
    (the newest version at all when every one is: `validate` then says so)."""
    live = [
        r.version
        for r in SLURM_RELEASES.values()
        if r.sample_os is not None and r.life(today) != "ended"
    ]
    return live[-1] if live else SLURM_VERSIONS[-1]


def version_key(version: str) -> tuple[int, ...]:
    """A Slurm major version as numbers, for ordering ("25.05" < "25.11")."""
    return tuple(int(part) for part in version.split("."))


#: The root device of the PCS sample AMIs (Amazon Linux 2 and 2023 images name their root
#: volume /dev/xvda: the Amazon Linux 2023 User Guide, "AL2023 on Amazon EC2"), which the
#: launch templates size and encrypt.
ROOT_DEVICE = "/dev/xvda"

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
    """The name of AWS's PCS sample AMI for a Slurm version and architecture (the newest
    sample image's OS where the version has none: a name no image has, for the error)."""
    release = SLURM_RELEASES.get(version)
    os_part = release.sample_os if release and release.sample_os else "al2023"
    return f"aws-pcs-sample_ami-{os_part}-{architecture}-slurm-{version}"


def slurm_prefix(version: str) -> str:
    """Where Slurm lives on a PCS AMI."""
    return SLURM_PREFIX.format(version=version)
