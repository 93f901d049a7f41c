"""Every default of the spec, in one place.

Static defaults are the constants below (the model's field defaults point at them). Defaults
that depend on other fields or on the catalog (EFA on where the type has it, placement groups
off with reserved capacity, FSx sizing) are filled by ``provisioner.spec.resolve`` from these;
`fmctl validate --show-defaults` prints its result.
"""

from __future__ import annotations

from datetime import date
from typing import Final

from provisioner.catalog.pcs import default_slurm_version

SCHEDULER: Final = "slurm"
VPC_CIDR = "10.0.0.0/16"
HEAD_NODE_INSTANCE_TYPE = "m7i.4xlarge"
#: The head node when every GPU pool is arm64 (p6e-gb200): Graviton, the same size
#: (ParallelCluster refuses a head node of another architecture than its compute).
HEAD_NODE_INSTANCE_TYPE_ARM64 = "m7g.4xlarge"
HEAD_NODE_ROOT_GIB = 100
SYSTEM_NODE_INSTANCE_TYPE = "m7i.2xlarge"
#: EKS's system nodes when every GPU pool is arm64: Graviton, the same size, so the whole
#: cluster runs one architecture (every image fmctl deploys has an arm64 build).
SYSTEM_NODE_INSTANCE_TYPE_ARM64 = "m7g.2xlarge"
SYSTEM_NODE_COUNT = 2
#: Most instances a GPU pool may ask for: a larger count is taken for a typo.
MAX_POOL_COUNT = 4096
CAPACITY_TYPE: Final = "on-demand"
#: What a Capacity Block's running jobs are sent an hour before its end: SIGUSR1, the one
#: PyTorch Lightning's SLURMEnvironment listens on (requeue_signal) to checkpoint and requeue.
CHECKPOINT_SIGNAL: Final = "USR1"
BUDGET_ACTIONS: Final = "alert"
#: cost.idle: how long a GPU node idles before it counts (the issue's example), and what then.
IDLE_AFTER = "1h"
IDLE_ACTION: Final = "alert"
#: GpuNodeIdle's `for` without cost.idle.
IDLE_ALERT_AFTER = "30m"
FSX_MOUNT_PATH = "/fsx"
FSX_CAPACITY_GIB = 1200
FSX_DEPLOYMENT_TYPE: Final = "PERSISTENT_2"
#: The middle of each persistent type's allowed throughputs; scratch types take none.
FSX_THROUGHPUT_PER_TIB = {"PERSISTENT_1": 200, "PERSISTENT_2": 250}
#: What `down` does with a file system fmctl made.
FSX_DELETION_POLICY: Final = "delete"
LOCAL_NVME_MOUNT_PATH = "/scratch"
SLURM_OS: Final = "alinux2023"
SLURM_SCALEDOWN_IDLETIME = 10
SLURM_PROVIDER: Final = "parallelcluster"
PCS_SIZE: Final = "SMALL"


def pcs_slurm_version() -> str:
    """The newest Slurm PCS still creates clusters on today and publishes a sample AMI for
    (catalog/pcs.py dates each version: a fixed default would go past its end of life)."""
    return default_slurm_version(date.today())


PCS_ACCOUNTING: Final = "none"
PCS_LOGIN_COUNT = 1
#: EKS versions fmctl renders for and tests against (kubernetes-validate has schemas for all).
KUBERNETES_VERSIONS = ("1.30", "1.31", "1.32", "1.33", "1.34", "1.35", "1.36")
#: The newest version in EKS standard support whose end is furthest away (catalog/eks_versions.py
#: dates it; a test fails once the default has left standard support).
KUBERNETES_VERSION = "1.35"
#: Who applies the in-cluster stack (kubernetes/): fmctl, or Argo CD / Flux.
IN_CLUSTER_STACK: Final = "fmctl"
#: Kueue's topology annotation on fmctl's jobs: all pods in one domain, or only preferably.
TOPOLOGY_PLACEMENT: Final = "required"
#: CloudWatch retention of the EKS control-plane logs (days; CloudWatch accepts a fixed set).
CONTROL_PLANE_LOG_DAYS = 30
GITOPS_REVISION = "main"
#: Where state lives unless the spec or FMCTL_STATE says otherwise.
STATE_BACKEND: Final = "local"
STATE_PREFIX = "fmctl"
#: How long `up` waits for the pods or jobs on nodes a change takes away (a pool scaled in
#: or removed) before it stops: long enough for a training job to checkpoint and end, short
#: enough that a forgotten job does not hold a change for a day.
DRAIN_TIMEOUT: Final = "30m"
#: The health agent (slurm/lib/health-agent.sh): how often it looks, and how many of a
#: partition's nodes it may have in repair at once (issue 33: max(1, 10%)).
HEALTH_INTERVAL: Final = "30s"
HEALTH_MAX_IN_REPAIR: Final = "10%"
#: A node-level fault gets a new instance (a reboot leaves suspect hardware in the pool).
HEALTH_REPAIR: Final = "replace"
#: dcgmi diag -r 2 (medium: a few minutes on 8 GPUs), what issue 33 asks of a returning node.
HEALTH_VERIFY_DCGM_LEVEL: Final = 2
#: Slurm jobs on such nodes: waited for (requeue: put back in the queue at once).
DRAIN_JOBS: Final = "wait"
