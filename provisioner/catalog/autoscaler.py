"""The Kubernetes Cluster Autoscaler fmctl runs on EKS for pools that shrink when idle
(``cost.idle.action: scale-down``), with the facts it is configured from.

Sources (kubernetes/autoscaler, read at the tags below; the mirror's newest commit is of
2026-08-22):

- Versions: "Cluster Autoscaler releases new minor versions shortly after OSS Kubernetes
  release", its minor matching the cluster's (``cluster-autoscaler/README.md``); the newest
  patch tag ``cluster-autoscaler-1.MINOR.PATCH`` of each minor. The image is
  ``registry.k8s.io/autoscaling/cluster-autoscaler:vVERSION`` (the chart's ``values.yaml``,
  ``image.repository`` and a ``v`` tag).
- On AWS (``cloudprovider/aws/README.md``): node groups are Auto Scaling groups, found by
  ``--node-group-auto-discovery=asg:tag=KEY=VALUE`` ("the ASGs that have at least all the
  given tags", values included); a group's minimum and maximum are respected, "it will only
  adjust the desired value". Scaling up from zero, it knows a group's nodes only from the
  group's tags ``k8s.io/cluster-autoscaler/node-template/label/NAME``, ``.../taint/NAME``
  (``VALUE:EFFECT``) and ``.../resources/NAME`` (an EKS managed node group's own labels and
  taints are read with ``eks:DescribeNodegroup`` only while it has never had a node).
  GPU nodes carry ``k8s.amazonaws.com/accelerator`` (``GPULabel`` in
  ``aws_cloud_provider.go``), so that it waits for the device plugin instead of scaling up
  again.
- Scale-down (``simulator/utilization/info.go``): a GPU node's utilization is the sum of
  its pods' GPU requests over its allocatable GPUs, CPU and memory ignored; below
  ``--scale-down-gpu-utilization-threshold`` for ``--scale-down-unneeded-time`` it is
  removed (``config/flags/flags.go``; 10 minutes and 0.5 by default).
- ProvisioningRequests (``apis/provisioningrequest/autoscaling.x-k8s.io/v1``,
  ``provisioningrequest/besteffortatomic``): with ``--enable-provisioning-requests``, a
  request of class ``best-effort-atomic-scale-up.autoscaling.x-k8s.io`` is scaled up for
  all its pods or not at all, and marked ``Provisioned`` as soon as the scale-up is
  requested; the capacity is booked for 10 minutes (``processors/provreq``).
- IAM (``cloudprovider/aws/README.md``, "IAM Policy"): the Describe calls and
  ``eks:DescribeNodegroup`` to read, ``autoscaling:SetDesiredCapacity`` and
  ``autoscaling:TerminateInstanceInAutoScalingGroup`` to act; the Auto Scaling User Guide
  ("Tags for security") limits the two writes to groups with a tag
  (``autoscaling:ResourceTag/KEY``); its Describe actions take no resource-level
  permission ("Amazon EC2 Auto Scaling identity-based policy examples").
"""

from __future__ import annotations

#: The newest Cluster Autoscaler of each Kubernetes minor (tag cluster-autoscaler-VERSION).
VERSIONS = {
    "1.30": "1.30.7",
    "1.31": "1.31.5",
    "1.32": "1.32.7",
    "1.33": "1.33.6",
    "1.34": "1.34.5",
    "1.35": "1.35.2",
    "1.36": "1.36.1",
}
REPOSITORY = "registry.k8s.io/autoscaling/cluster-autoscaler"
#: The tag fmctl puts on a shrinking pool's Auto Scaling group (value: the cluster's name):
#: what the autoscaler discovers groups by, and what its role may scale.
DISCOVERY_TAG = "fmctl.dev/autoscaler"
#: The node-template tag prefixes it reads (labels, taints, resources).
TEMPLATE_PREFIX = "k8s.io/cluster-autoscaler/node-template/"
#: The label that marks a GPU node for it on AWS.
GPU_LABEL = "k8s.amazonaws.com/accelerator"
#: Its ProvisioningRequest class that scales up for all of a request's pods, or none.
PROVISIONING_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
#: Its service account (kube-system), the one its pod identity association names.
SERVICE_ACCOUNT = "cluster-autoscaler"
NAMESPACE = "kube-system"
#: A GPU node with fewer GPUs requested than this share is unneeded: below one GPU of
#: eight (0.125), so that a node running any GPU pod is kept (at the default, 0.5, a node
#: running a job on three of its eight GPUs would be emptied onto another).
GPU_UTILIZATION_THRESHOLD = "0.01"
#: The Auto Scaling calls it reads with (no resource-level permission) and acts with.
READ_ACTIONS = (
    "autoscaling:DescribeAutoScalingGroups",
    "autoscaling:DescribeAutoScalingInstances",
    "autoscaling:DescribeLaunchConfigurations",
    "autoscaling:DescribeScalingActivities",
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:GetInstanceTypesFromInstanceRequirements",
    "eks:DescribeNodegroup",
)
WRITE_ACTIONS = (
    "autoscaling:SetDesiredCapacity",
    "autoscaling:TerminateInstanceInAutoScalingGroup",
)


def image(kubernetes: str) -> str:
    """The autoscaler's image for a cluster of Kubernetes ``kubernetes`` (MAJOR.MINOR)."""
    return f"{REPOSITORY}:v{VERSIONS[kubernetes]}"


def policy(cluster: str) -> dict[str, object]:
    """The autoscaler's role policy: read anything it must, change only the groups tagged
    for this cluster."""
    tagged = {f"autoscaling:ResourceTag/{DISCOVERY_TAG}": cluster}
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": list(READ_ACTIONS), "Resource": "*"},
            {
                "Effect": "Allow",
                "Action": list(WRITE_ACTIONS),
                "Resource": "*",
                "Condition": {"StringEquals": tagged},
            },
        ],
    }
