"""Every offline rule with failing and passing cases, checked against the rule registry.

Each case edits the valid p5 example (``base``) and states which rule code must (or must
not) appear, at which spec path. ``test_every_rule_has_cases`` fails when a rule is added
without cases of both kinds.
"""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
import yaml

from provisioner.catalog import load_catalog
from provisioner.catalog.eks_versions import CALENDAR
from provisioner.spec import defaults
from provisioner.spec.problems import Problem
from provisioner.validate.rules import all_codes
from provisioner.validate.rules.general import kubernetes_version
from provisioner.validate.rules.registry import RuleContext
from tests.conftest import DELETE, ROOT, set_path, validate_data

Edit = tuple[tuple[Any, ...], Any]
POOL = ("compute", "gpuPools", 0)
FSX = ("storage", "fsxLustre")
ON_DEMAND = ((*POOL, "capacity"), {"type": "on-demand"})
HEAD = ("compute", "headNode")
#: The base spec's pool as one UltraServer Capacity Block of 18 p6e-gb200 (arm64).
GB200: list[Edit] = [((*POOL, "instanceType"), "p6e-gb200.36xlarge"), ((*POOL, "count"), 18)]
#: The base spec on AWS PCS (which runs the controller: no topology.conf of fmctl's).
PCS: list[Edit] = [(("slurm", "provider"), "pcs"), (("slurm", "topologyAware"), False)]
#: PCS runs UltraServer node groups on Slurm 25.05 or later, on an AMI with nvidia-imex (the
#: sample AMIs have none): the newest version and an image of the user's.
PCS_ULTRA: list[Edit] = [
    *PCS,
    (("slurm", "pcs"), {"slurmVersion": "25.11"}),
    (("slurm", "amiId"), "ami-0123456789abcdef0"),
]
#: A Blackwell (B200) pool.
B200 = ((*POOL, "instanceType"), "p6-b200.48xlarge")
#: GB200 on EKS (Graviton system nodes, no head node), on 1.34 unless an edit says.
EKS_GB200: list[Edit] = [
    (("scheduler",), "kubernetes"),
    (HEAD, DELETE),
    (("kubernetes",), {"version": "1.34"}),
]

# (code, case id, edits, path where the problem must be reported, level)
FAILING: list[tuple[str, str, list[Edit], str, str]] = [
    (
        "ultraserver-capacity",
        "on-demand",
        [*GB200, ON_DEMAND, (HEAD, DELETE)],
        "compute.gpuPools[0].capacity.type",
        "error",
    ),
    (
        "ultraserver-capacity",
        "block-of-16",
        [*GB200, ((*POOL, "count"), 16), (HEAD, DELETE)],
        "compute.gpuPools[0].count",
        "error",
    ),
    ("architecture-mix", "x86-head", GB200, "compute.headNode.instanceType", "error"),
    (
        "ultraserver-pcs-slurm",
        "slurm-24.11",
        [*GB200, *PCS, (("slurm", "pcs"), {"slurmVersion": "24.11"})],
        "slurm.pcs.slurmVersion",
        "error",
    ),
    (
        "architecture-mix",
        "graviton-head-x86-pool",
        [((*HEAD, "instanceType"), "m7g.4xlarge")],
        "compute.headNode.instanceType",
        "error",
    ),
    ("name-format", "uppercase", [(("metadata", "name"), "Bad_Name")], "metadata.name", "error"),
    ("name-format", "too-short", [(("metadata", "name"), "ab")], "metadata.name", "error"),
    ("name-format", "trailing-dash", [(("metadata", "name"), "abc-")], "metadata.name", "error"),
    ("name-format", "double-dash", [(("metadata", "name"), "a--b")], "metadata.name", "error"),
    ("name-format", "too-long", [(("metadata", "name"), "a" * 41)], "metadata.name", "error"),
    ("region-unknown", "typo", [(("metadata", "region"), "us-esat-1")], "metadata.region", "error"),
    ("ttl-format", "words", [(("metadata", "ttl"), "8 hours")], "metadata.ttl", "error"),
    (
        "drain-timeout",
        "words",
        [(("compute", "drain", "timeout"), "half an hour")],
        "compute.drain.timeout",
        "error",
    ),
    ("ttl-format", "zero", [(("metadata", "ttl"), "0h")], "metadata.ttl", "error"),
    (
        "health-settings",
        "too-often",
        [(("health",), {"interval": "5s"})],
        "health.interval",
        "error",
    ),
    ("health-settings", "hours", [(("health",), {"interval": "1h"})], "health.interval", "error"),
    (
        "cost-budget",
        "no-limit",
        [(("cost",), {"budget": {"notify": ["ops@example.com"]}})],
        "cost.budget",
        "error",
    ),
    (
        "cost-budget",
        "zero",
        [(("cost",), {"budget": {"monthly": 0, "notify": ["ops@example.com"]}})],
        "cost.budget.monthly",
        "error",
    ),
    (
        "cost-budget",
        "phone-number",
        [(("cost",), {"budget": {"total": 900, "notify": ["+1 555 0100"]}})],
        "cost.budget.notify[0]",
        "error",
    ),
    (
        "cost-budget",
        "eleven-emails",
        [
            (
                ("cost",),
                {"budget": {"total": 900, "notify": [f"a{i}@example.com" for i in range(11)]}},
            )
        ],
        "cost.budget.notify[10]",
        "error",
    ),
    (
        "cost-budget",
        "stop-and-own-topic",
        [
            (
                ("cost",),
                {
                    "budget": {
                        "monthly": 900,
                        "actions": "stop",
                        "notify": ["arn:aws:sns:us-east-1:123456789012:budget-alerts"],
                    }
                },
            )
        ],
        "cost.budget.notify",
        "warning",
    ),
    (
        "cost-budget",
        "alerts-nobody",
        [(("cost",), {"budget": {"monthly": 900}})],
        "cost.budget.notify",
        "error",
    ),
    (
        "cost-idle",
        "too-short",
        [(("cost",), {"idle": {"after": "5m"}})],
        "cost.idle.after",
        "error",
    ),
    (
        "cost-idle",
        "words",
        [(("cost",), {"idle": {"after": "an hour"}})],
        "cost.idle.after",
        "error",
    ),
    (
        "cost-idle",
        "eks-nothing-to-scale",
        [(("scheduler",), "kubernetes"), (("cost",), {"idle": {"action": "scale-down"}})],
        "cost.idle.action",
        "warning",
    ),
    (
        "cost-idle",
        "two-idle-times",
        [
            ON_DEMAND,
            (("slurm", "scaledownIdletime"), 10),
            (("cost",), {"idle": {"after": "1h", "action": "scale-down"}}),
        ],
        "slurm.scaledownIdletime",
        "error",
    ),
    (
        "cost-idle",
        "nothing-to-scale",
        [(("cost",), {"idle": {"action": "scale-down"}})],  # the base pool is a block
        "cost.idle.action",
        "warning",
    ),
    (
        "health-repair",
        "drain-only-parallelcluster",
        [(("health",), {"repair": "drain-only"})],
        "health.repair",
        "error",
    ),
    (
        "health-repair",
        "drain-only-eks",
        [(("scheduler",), "kubernetes"), (("health",), {"repair": "drain-only"})],
        "health.repair",
        "error",
    ),
    (
        "health-kubernetes-gate",
        "on-slurm",
        [(("health",), {"verify": {"kubernetesGate": True}})],
        "health.verify.kubernetesGate",
        "error",
    ),
    (
        "health-kubernetes-gate",
        "health-off",
        [
            (("scheduler",), "kubernetes"),
            (("health",), {"enabled": False, "verify": {"kubernetesGate": True}}),
        ],
        "health.verify.kubernetesGate",
        "error",
    ),
    (
        "health-kubernetes-agent",
        "on-slurm",
        [(("health",), {"kubernetesAgent": True})],
        "health.kubernetesAgent",
        "error",
    ),
    (
        "health-kubernetes-agent",
        "health-off",
        [
            (("scheduler",), "kubernetes"),
            (("health",), {"enabled": False, "kubernetesAgent": True}),
        ],
        "health.kubernetesAgent",
        "error",
    ),
    (
        "health-dcgm-extended",
        "level-4-parallelcluster",
        [(("health",), {"verify": {"dcgmLevel": 4}})],
        "health.verify.dcgmLevel",
        "warning",
    ),
    (
        "health-dcgm-extended",
        "level-3-pcs",
        [(("slurm",), {"provider": "pcs"}), (("health",), {"verify": {"dcgmLevel": 3}})],
        "health.verify.dcgmLevel",
        "error",
    ),
    (
        "health-dcgm-extended",
        "level-4-eks-gate",
        [
            (("scheduler",), "kubernetes"),
            (("health",), {"verify": {"dcgmLevel": 4, "kubernetesGate": True}}),
        ],
        "health.verify.dcgmLevel",
        "warning",
    ),
    (
        "health-dcgm-extended",
        "level-4-eks-default",  # the gate is on unless said
        [(("scheduler",), "kubernetes"), (("health",), {"verify": {"dcgmLevel": 4}})],
        "health.verify.dcgmLevel",
        "warning",
    ),
    (
        "health-settings",
        "no-budget",
        [(("health",), {"maxInRepair": 0})],
        "health.maxInRepair",
        "error",
    ),
    (
        "health-settings",
        "share-over-100",
        [(("health",), {"maxInRepair": "150%"})],
        "health.maxInRepair",
        "error",
    ),
    ("state-location", "s3-no-bucket", [(("state",), {"backend": "s3"})], "state", "error"),
    (
        "state-location",
        "bad-bucket",
        [(("state",), {"backend": "s3", "bucket": "Team_State"})],
        "state.bucket",
        "error",
    ),
    (
        "state-location",
        "bucket-but-local",
        [(("state",), {"bucket": "team-state"})],
        "state.backend",
        "error",
    ),
    (
        "state-location",
        "slashed-prefix",
        [(("state",), {"backend": "s3", "bucket": "team-state", "prefix": "/ml/"})],
        "state.prefix",
        "error",
    ),
    (
        "tag-reserved",
        "aws-prefix",
        [(("metadata", "tags"), {"aws:owner": "x"})],
        "metadata.tags.aws:owner",
        "error",
    ),
    (
        "tag-reserved",
        "fmctl-prefix",
        [(("metadata", "tags"), {"fmctl.dev/cluster": "x"})],
        "metadata.tags.fmctl.dev/cluster",
        "error",
    ),
    (
        "tag-reserved",
        "long-value",
        [(("metadata", "tags"), {"team": "x" * 257})],
        "metadata.tags.team",
        "error",
    ),
    (
        "kubernetes-version",
        "old",
        [(("kubernetes",), {"version": "1.20"})],
        "kubernetes.version",
        "error",
    ),
    (
        "kubernetes-version",
        "not-a-version",
        [(("kubernetes",), {"version": "latest"})],
        "kubernetes.version",
        "error",
    ),
    (
        "secrets-key-arn",
        "alias",
        [
            (
                ("kubernetes",),
                {
                    "version": "1.33",
                    "secretsKeyArn": "arn:aws:kms:us-east-1:123456789012:alias/eks",
                },
            )
        ],
        "kubernetes.secretsKeyArn",
        "error",
    ),
    (
        "secrets-key-arn",
        "other-region",
        [
            (
                ("kubernetes",),
                {
                    "version": "1.33",
                    "secretsKeyArn": "arn:aws:kms:eu-west-1:123456789012:key/"
                    "1234abcd-12ab-34cd-56ef-1234567890ab",
                },
            )
        ],
        "kubernetes.secretsKeyArn",
        "error",
    ),
    (
        "grafana-needs-prometheus",
        "no-prometheus",
        [(("observability", "prometheus"), False)],
        "observability.grafana",
        "error",
    ),
    (
        "amp-workspace",
        "not-an-arn",
        [(("observability", "ampWorkspaceArn"), "ws-0a1b2c3d")],
        "observability.ampWorkspaceArn",
        "error",
    ),
    (
        "amp-workspace",
        "no-prometheus",
        [
            (
                ("observability", "ampWorkspaceArn"),
                "arn:aws:aps:us-east-1:123456789012:workspace/ws-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
            ),
            (("observability", "prometheus"), False),
            (("observability", "grafana"), False),
        ],
        "observability.ampWorkspaceArn",
        "error",
    ),
    (
        "amp-workspace",
        "other-region",
        [
            (
                ("observability", "ampWorkspaceArn"),
                "arn:aws:aps:eu-west-1:123456789012:workspace/ws-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
            )
        ],
        "observability.ampWorkspaceArn",
        "warning",
    ),
    (
        "az-region",
        "other-region",
        [(("network", "availabilityZone"), "us-west-2a")],
        "network.availabilityZone",
        "error",
    ),
    (
        "az-region",
        "region-not-az",
        [(("network", "availabilityZone"), "us-east-1")],
        "network.availabilityZone",
        "error",
    ),
    (
        "az-region",
        "local-zone",
        [(("network", "availabilityZone"), "us-east-1-bos-1a")],
        "network.availabilityZone",
        "error",
    ),
    (
        "cidr-invalid",
        "host-bits",
        [(("network", "vpcCidr"), "10.0.0.1/16")],
        "network.vpcCidr",
        "error",
    ),
    (
        "cidr-invalid",
        "too-big",
        [(("network", "vpcCidr"), "10.0.0.0/8")],
        "network.vpcCidr",
        "error",
    ),
    (
        "cidr-invalid",
        "public",
        [(("network", "vpcCidr"), "8.8.0.0/16")],
        "network.vpcCidr",
        "error",
    ),
    ("cidr-invalid", "ipv6", [(("network", "vpcCidr"), "fd00::/56")], "network.vpcCidr", "error"),
    (
        "cidr-invalid",
        "garbage-ssh",
        [(("network", "sshCidr"), "my office")],
        "network.sshCidr",
        "error",
    ),
    (
        "cidr-invalid",
        "bad-api",
        [(("network", "apiCidrs"), ["300.1.1.1/32"])],
        "network.apiCidrs[0]",
        "error",
    ),
    (
        "cidr-invalid",
        "bare-address",
        [(("network", "sshCidr"), "198.51.100.7")],
        "network.sshCidr",
        "error",
    ),
    (
        "api-private",
        "no-api-cidrs",
        [(("scheduler",), "kubernetes")],
        "network",
        "warning",
    ),
    (
        "cidr-world-open",
        "ssh",
        [(("network", "sshCidr"), "0.0.0.0/0")],
        "network.sshCidr",
        "warning",
    ),
    (
        "cidr-world-open",
        "api",
        [(("network", "apiCidrs"), ["0.0.0.0/0"])],
        "network.apiCidrs[0]",
        "warning",
    ),
    (
        "vpc-choice",
        "both",
        [
            (("network", "vpcId"), "vpc-0a1b2c3d4e5f60718"),
            (("network", "subnetId"), "subnet-0a1b2c3d4e5f60718"),
        ],
        "network.vpcCidr",
        "error",
    ),
    (
        "vpc-choice",
        "vpc-without-subnet",
        [(("network", "vpcCidr"), DELETE), (("network", "vpcId"), "vpc-0a1b2c3d4e5f60718")],
        "network.vpcId",
        "error",
    ),
    (
        "vpc-choice",
        "eks-one-az",
        [
            (("scheduler",), "kubernetes"),
            (("network", "vpcCidr"), DELETE),
            (("network", "vpcId"), "vpc-0a1b2c3d4e5f60718"),
            (("network", "subnetId"), "subnet-0a1b2c3d4e5f60718"),
        ],
        "network.vpcId",
        "error",
    ),
    (
        "vpc-choice",
        "subnet-without-vpc",
        [(("network", "subnetId"), "subnet-0a1b2c3d")],
        "network.subnetId",
        "error",
    ),
    (
        "vpc-choice",
        "bad-vpc-id",
        [
            (("network", "vpcCidr"), DELETE),
            (("network", "vpcId"), "vpc-xyz"),
            (("network", "subnetId"), "subnet-0a1b2c3d"),
        ],
        "network.vpcId",
        "error",
    ),
    (
        "vpc-choice",
        "bad-subnet-id",
        [
            (("network", "vpcCidr"), DELETE),
            (("network", "vpcId"), "vpc-0a1b2c3d"),
            (("network", "subnetId"), "sub-1"),
        ],
        "network.subnetId",
        "error",
    ),
    ("pool-names", "uppercase", [((*POOL, "name"), "Train")], "compute.gpuPools[0].name", "error"),
    ("pool-names", "none", [(("compute", "gpuPools"), [])], "compute.gpuPools", "error"),
    (
        "instance-type",
        "typo",
        [((*POOL, "instanceType"), "p5.48xlage")],
        "compute.gpuPools[0].instanceType",
        "error",
    ),
    (
        "instance-type",
        "cpu-type",
        [((*POOL, "instanceType"), "m7i.4xlarge")],
        "compute.gpuPools[0].instanceType",
        "error",
    ),
    (
        "node-instance-type",
        "malformed",
        [(("compute", "headNode", "instanceType"), "m7i")],
        "compute.headNode.instanceType",
        "error",
    ),
    (
        "node-instance-type",
        "close-to-known",
        [(("compute", "headNode", "instanceType"), "m7i.4xlarg")],
        "compute.headNode.instanceType",
        "error",
    ),
    ("pool-count", "zero", [((*POOL, "count"), 0)], "compute.gpuPools[0].count", "error"),
    ("pool-count", "typo", [((*POOL, "count"), 40000)], "compute.gpuPools[0].count", "error"),
    (
        "node-instance-type",
        "gpu-head",
        [(("compute", "headNode", "instanceType"), "p5.48xlarge")],
        "compute.headNode.instanceType",
        "warning",
    ),
    (
        "pool-count",
        "min-above-max",
        [ON_DEMAND, ((*POOL, "minCount"), 20)],
        "compute.gpuPools[0].minCount",
        "error",
    ),
    (
        "pool-count",
        "system-nodes",
        [(("scheduler",), "kubernetes"), (("compute", "systemNodes"), {"count": 0})],
        "compute.systemNodes.count",
        "error",
    ),
    (
        "pool-count",
        "small-root",
        [(("compute", "headNode", "rootVolumeGiB"), 10)],
        "compute.headNode.rootVolumeGiB",
        "error",
    ),
    (
        "efa-unsupported",
        "g6e-xlarge",
        [ON_DEMAND, ((*POOL, "instanceType"), "g6e.xlarge"), ((*POOL, "efa"), True)],
        "compute.gpuPools[0].efa",
        "error",
    ),
    (
        "reservation-id",
        "missing",
        [((*POOL, "capacity"), {"type": "capacity-block"})],
        "compute.gpuPools[0].capacity",
        "error",
    ),
    (
        "reservation-id",
        "malformed",
        [((*POOL, "capacity", "reservationId"), "cr-123")],
        "compute.gpuPools[0].capacity.reservationId",
        "error",
    ),
    (
        "reservation-id",
        "not-a-cr",
        [((*POOL, "capacity", "reservationId"), "cb-0123456789abcdef0")],
        "compute.gpuPools[0].capacity.reservationId",
        "error",
    ),
    (
        "reservation-id",
        "on-demand-with-id",
        [((*POOL, "capacity", "type"), "on-demand")],
        "compute.gpuPools[0].capacity.reservationId",
        "error",
    ),
    (
        "capacity-block",
        "min-count",
        [((*POOL, "minCount"), 4)],
        "compute.gpuPools[0].minCount",
        "error",
    ),
    (
        "capacity-block",
        "type-not-offered",
        [((*POOL, "instanceType"), "g6e.48xlarge")],
        "compute.gpuPools[0].capacity.type",
        "error",
    ),
    (
        "capacity-block",
        "signal-on-demand",
        [((*POOL, "capacity"), {"type": "on-demand", "checkpointSignal": "USR2"})],
        "compute.gpuPools[0].capacity.checkpointSignal",
        "error",
    ),
    (
        "placement-group",
        "with-capacity-block",
        [((*POOL, "placementGroup"), True)],
        "compute.gpuPools[0].placementGroup",
        "warning",
    ),
    (
        "placement-group",
        "with-reservation",
        [((*POOL, "capacity", "type"), "reservation"), ((*POOL, "placementGroup"), True)],
        "compute.gpuPools[0].placementGroup",
        "warning",
    ),
    (
        "placement-group",
        "ultraserver",
        [
            ON_DEMAND,
            ((*POOL, "placementGroup"), True),
            ((*POOL, "instanceType"), "p6e-gb200.36xlarge"),
        ],
        "compute.gpuPools[0].placementGroup",
        "error",
    ),
    (
        "fsx-capacity",
        "p2-off-step",
        [((*FSX, "capacityGiB"), 5000)],
        "storage.fsxLustre.capacityGiB",
        "error",
    ),
    (
        "fsx-capacity",
        "scratch1-off-step",
        [
            ((*FSX, "deploymentType"), "SCRATCH_1"),
            ((*FSX, "throughputPerTiB"), DELETE),
            ((*FSX, "capacityGiB"), 4800),
        ],
        "storage.fsxLustre.capacityGiB",
        "error",
    ),
    (
        "fsx-throughput",
        "p2-300",
        [((*FSX, "throughputPerTiB"), 300)],
        "storage.fsxLustre.throughputPerTiB",
        "error",
    ),
    (
        "fsx-throughput",
        "p1-250",
        [((*FSX, "deploymentType"), "PERSISTENT_1")],
        "storage.fsxLustre.throughputPerTiB",
        "error",
    ),
    (
        "fsx-throughput",
        "scratch",
        [((*FSX, "deploymentType"), "SCRATCH_2")],
        "storage.fsxLustre.throughputPerTiB",
        "error",
    ),
    (
        "fsx-s3",
        "export-only",
        [((*FSX, "s3"), {"exportPath": "s3://my-datasets/out"})],
        "storage.fsxLustre.s3.exportPath",
        "error",
    ),
    (
        "fsx-s3",
        "other-bucket",
        [((*FSX, "s3", "exportPath"), "s3://elsewhere/out")],
        "storage.fsxLustre.s3.exportPath",
        "error",
    ),
    (
        "fsx-s3",
        "not-s3",
        [((*FSX, "s3", "importPath"), "https://my-datasets/llm")],
        "storage.fsxLustre.s3.importPath",
        "error",
    ),
    ("fsx-s3", "empty", [((*FSX, "s3"), {})], "storage.fsxLustre.s3", "error"),
    (
        "fsx-export-under-import",
        "checkpoints-in-dataset",
        [((*FSX, "s3", "exportPath"), "s3://my-datasets/llm/checkpoints")],
        "storage.fsxLustre.s3.exportPath",
        "error",
    ),
    (
        "fsx-export-under-import",
        "trailing-slashes",
        [
            ((*FSX, "s3", "importPath"), "s3://my-datasets/llm/"),
            ((*FSX, "s3", "exportPath"), "s3://my-datasets/llm/out/"),
        ],
        "storage.fsxLustre.s3.exportPath",
        "error",
    ),
    (
        "fsx-two-way",
        "same-prefix",
        [((*FSX, "s3", "exportPath"), "s3://my-datasets/llm/")],
        "storage.fsxLustre.s3.exportPath",
        "warning",
    ),
    (
        "pool-labels",
        "reserved-prefix",
        [((*POOL, "labels"), {"kubernetes.io/role": "gpu"})],
        "compute.gpuPools[0].labels.kubernetes.io/role",
        "error",
    ),
    (
        "pool-labels",
        "value-with-a-space",
        [((*POOL, "labels"), {"workload": "pre training"})],
        "compute.gpuPools[0].labels.workload",
        "error",
    ),
    (
        "fsx-existing",
        "with-capacity",
        [((*FSX, "fileSystemId"), "fs-0123456789abcdef0")],
        "storage.fsxLustre.capacityGiB",
        "error",
    ),
    (
        "fsx-existing",
        "bad-id",
        [((*FSX,), {"fileSystemId": "fs-12"})],
        "storage.fsxLustre.fileSystemId",
        "error",
    ),
    (
        "mount-path",
        "relative",
        [((*FSX, "mountPath"), "fsx")],
        "storage.fsxLustre.mountPath",
        "error",
    ),
    (
        "mount-path",
        "system-dir",
        [((*FSX, "mountPath"), "/home")],
        "storage.fsxLustre.mountPath",
        "error",
    ),
    (
        "mount-path",
        "shared",
        [(("storage", "localNvme", "mountPath"), "/fsx")],
        "storage.localNvme.mountPath",
        "error",
    ),
    (
        "local-nvme",
        "no-drives",
        [((*POOL, "instanceType"), "m7i.4xlarge")],
        "compute.gpuPools[0].instanceType",
        "error",
    ),
    (
        "log-retention",
        "not-cloudwatch",
        [(("kubernetes", "controlPlaneLogDays"), 45)],
        "kubernetes.controlPlaneLogDays",
        "error",
    ),
    (
        "gitops-repo",
        "bare-name",
        [(("gitops",), {"repoUrl": "my-clusters"})],
        "gitops.repoUrl",
        "error",
    ),
    (
        "gitops-repo",
        "path-escapes",
        [(("gitops",), {"repoUrl": "https://github.com/acme/c.git", "path": "../c"})],
        "gitops.path",
        "error",
    ),
    (
        "gitops-repo",
        "gitops-without-repo",
        [
            (("scheduler",), "kubernetes"),
            (("network", "apiCidrs"), []),
            (("kubernetes", "inClusterStack"), "gitops"),
        ],
        "kubernetes.inClusterStack",
        "error",
    ),
    (
        "head-node-ssh",
        "key-without-cidr",
        [
            (("compute", "headNode"), {"instanceType": "m7i.4xlarge", "keyName": "ops"}),
            (("network", "sshCidr"), DELETE),
        ],
        "compute.headNode.keyName",
        "warning",
    ),
    (
        "fsx-retain",
        "fmctl-vpc",
        [((*FSX, "deletionPolicy"), "retain")],
        "storage.fsxLustre.deletionPolicy",
        "error",
    ),
    (
        "fsx-retain",
        "existing-fs",
        [((*FSX,), {"fileSystemId": "fs-0123456789abcdef0", "deletionPolicy": "retain"})],
        "storage.fsxLustre.deletionPolicy",
        "warning",
    ),
    (
        "pcs-settings",
        "ami-on-parallelcluster",
        [(("slurm", "amiId"), "ami-0123456789abcdef0")],
        "slurm.amiId",
        "error",
    ),
    (
        "pcs-settings",
        "topology-on-pcs",
        [(("slurm", "provider"), "pcs")],
        "slurm.topologyAware",
        "error",
    ),
    (
        "pcs-names",
        "short-pool",
        [*PCS, ((*POOL, "name"), "gp")],
        "compute.gpuPools[0].name",
        "error",
    ),
    (
        "pcs-names",
        "login-pool",
        [*PCS, ((*POOL, "name"), "login")],
        "compute.gpuPools[0].name",
        "error",
    ),
    (
        "pcs-version",
        "retired",
        [*PCS, (("slurm", "pcs"), {"slurmVersion": "23.11"})],
        "slurm.pcs.slurmVersion",
        "error",
    ),
    (
        "pcs-version",
        "past-end-of-life",
        [*PCS, (("slurm", "pcs"), {"slurmVersion": "24.11"})],
        "slurm.pcs.slurmVersion",
        "error",
    ),
    (
        "pcs-version",
        "no-sample-ami",
        [*PCS, (("slurm", "pcs"), {"slurmVersion": "26.05"})],
        "slurm.pcs.slurmVersion",
        "error",
    ),
    ("pcs-os", "set-on-pcs", PCS, "slurm.os", "warning"),
    ("pcs-lacks", "said-on-every-pcs-spec", PCS, "slurm.provider", "warning"),
    (
        "ultraserver-topology",
        "parallelcluster-writes-it",
        [*GB200, (HEAD, DELETE), (("slurm", "topologyAware"), True)],
        "slurm.topologyAware",
        "warning",
    ),
    (
        "ultraserver-eks-nvlink",
        "gb200-on-eks-1.32",
        [*GB200, *EKS_GB200, (("kubernetes",), {"version": "1.32", "queueing": "none"})],
        "kubernetes.version",
        "warning",
    ),
    (
        "queueing-kubernetes-version",
        "gb200-kueue-on-1.33",
        [*GB200, *EKS_GB200, (("kubernetes",), {"version": "1.33"})],
        "kubernetes.version",
        "error",
    ),
    (
        "queueing-kubernetes-version",
        "kueue-said-on-1.33",
        [*GB200, *EKS_GB200, (("kubernetes",), {"version": "1.33", "queueing": "kueue"})],
        "kubernetes.queueing",
        "error",
    ),
    (
        "pcs-driver",
        "b200-on-a-550-sample",
        [*PCS, B200, (("slurm", "pcs"), {"slurmVersion": "25.05"})],
        "slurm.pcs.slurmVersion",
        "error",
    ),
    (
        "ultraserver-pcs-slurm",
        "sample-ami-has-no-imex",
        [*GB200, *PCS, (("slurm", "pcs"), {"slurmVersion": "25.11"})],
        "slurm.amiId",
        "error",
    ),
    (
        "pcs-custom-settings",
        "prolog-flags-on-ultraservers",
        [
            *GB200,
            *PCS_ULTRA,
            (
                ("slurm", "pcs"),
                {"slurmVersion": "25.11", "customSettings": {"PrologFlags": "Alloc"}},
            ),
        ],
        "slurm.pcs.customSettings.PrologFlags",
        "error",
    ),
    (
        "pcs-region",
        "unlisted",
        [
            *PCS,
            (("metadata", "region"), "ca-central-1"),
            (("network", "availabilityZone"), "ca-central-1a"),
        ],
        "metadata.region",
        "warning",
    ),
    ("pcs-size", "small", [*PCS, ((*POOL, "count"), 40)], "slurm.pcs.size", "error"),
    (
        "pcs-custom-settings",
        "prolog",
        [*PCS, (("slurm", "pcs"), {"customSettings": {"Prolog": "/opt/mine.sh"}})],
        "slurm.pcs.customSettings.Prolog",
        "error",
    ),
]

# (code, case id, edits): valid edge cases the rule must accept.
PASSING: list[tuple[str, str, list[Edit]]] = [
    ("ultraserver-capacity", "block-of-18", [*GB200, (HEAD, DELETE)]),
    ("ultraserver-capacity", "block-of-9", [*GB200, ((*POOL, "count"), 9), (HEAD, DELETE)]),
    ("architecture-mix", "default-head", [*GB200, (HEAD, DELETE)]),
    ("architecture-mix", "graviton-head", [*GB200, ((*HEAD, "instanceType"), "m7g.4xlarge")]),
    ("architecture-mix", "pcs-login", [*GB200, *PCS_ULTRA]),
    ("ultraserver-pcs-slurm", "slurm-25.11-own-ami", [*GB200, *PCS_ULTRA]),
    ("ultraserver-pcs-slurm", "x86-sample-ami", PCS),
    ("pcs-driver", "b200-on-25.11-sample", [*PCS, B200]),
    ("ultraserver-eks-nvlink", "gb200-on-slurm", [*GB200, (HEAD, DELETE)]),
    ("ultraserver-eks-nvlink", "gb200-on-eks-1.33", [*GB200, *EKS_GB200]),
    ("queueing-kubernetes-version", "gb200-kueue-on-1.34", [*GB200, *EKS_GB200]),
    (
        "queueing-kubernetes-version",
        "gb200-no-queueing-on-1.33",
        [*GB200, *EKS_GB200, (("kubernetes",), {"version": "1.33", "queueing": "none"})],
    ),
    ("pcs-os", "parallelcluster", []),
    ("pcs-lacks", "parallelcluster", []),
    (
        "ultraserver-topology",
        "gb200-without-topology-aware",
        [*GB200, (HEAD, DELETE), (("slurm", "topologyAware"), False)],
    ),
    ("pcs-driver", "b200-own-ami", [*PCS, B200, (("slurm", "amiId"), "ami-0123456789abcdef0")]),
    ("name-format", "dash-and-digits", [(("metadata", "name"), "a1-b2")]),
    ("name-format", "forty-chars", [(("metadata", "name"), "a" * 40)]),
    (
        "region-unknown",
        "eu",
        [(("metadata", "region"), "eu-west-1"), (("network", "availabilityZone"), "eu-west-1c")],
    ),
    ("ttl-format", "compound", [(("metadata", "ttl"), "1h30m")]),
    ("drain-timeout", "hours", [(("compute", "drain", "timeout"), "2h")]),
    ("health-settings", "count", [(("health",), {"interval": "2m", "maxInRepair": 2})]),
    (
        "cost-budget",
        "monthly-email-and-topic",
        [
            (
                ("cost",),
                {
                    "budget": {
                        "monthly": 20000,
                        "notify": [
                            "ops@example.com",
                            "arn:aws:sns:us-east-1:123456789012:budget-alerts",
                        ],
                    }
                },
            )
        ],
    ),
    ("cost-budget", "stop-alone", [(("cost",), {"budget": {"total": 5000.5, "actions": "stop"}})]),
    ("health-repair", "drain-only-pcs", [*PCS, (("health",), {"repair": "drain-only"})]),
    (
        "health-repair",
        "reboot-eks",
        [(("scheduler",), "kubernetes"), (("health",), {"repair": "reboot"})],
    ),
    (
        "health-repair",
        "drain-only-health-off",
        [(("health",), {"enabled": False, "repair": "drain-only"})],
    ),
    (
        "health-kubernetes-gate",
        "eks",
        [(("scheduler",), "kubernetes"), (("health",), {"verify": {"kubernetesGate": True}})],
    ),
    (
        "health-kubernetes-agent",
        "eks",
        [(("scheduler",), "kubernetes"), (("health",), {"kubernetesAgent": True})],
    ),
    ("health-settings", "share", [(("health",), {"enabled": False, "maxInRepair": "25%"})]),
    ("health-dcgm-extended", "level-3", [(("health",), {"verify": {"dcgmLevel": 3}})]),
    (
        "health-dcgm-extended",
        "eks-no-gate",
        [
            (("scheduler",), "kubernetes"),
            (("health",), {"verify": {"dcgmLevel": 4, "kubernetesGate": False}}),
        ],
    ),
    ("ttl-format", "days", [(("metadata", "ttl"), "3d")]),
    (
        "state-location",
        "s3",
        [(("state",), {"backend": "s3", "bucket": "team-state", "prefix": "teams/ml"})],
    ),
    ("tag-reserved", "plain", [(("metadata", "tags"), {"cost-center": "42"})]),
    ("kubernetes-version", "newest", [(("kubernetes",), {"version": "1.36"})]),
    (
        "secrets-key-arn",
        "same-region",
        [
            (
                ("kubernetes",),
                {
                    "version": "1.33",
                    "secretsKeyArn": "arn:aws:kms:us-east-1:123456789012:key/"
                    "1234abcd-12ab-34cd-56ef-1234567890ab",
                },
            )
        ],
    ),
    (
        "amp-workspace",
        "same-region",
        [
            (
                ("observability", "ampWorkspaceArn"),
                "arn:aws:aps:us-east-1:123456789012:workspace/ws-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
            )
        ],
    ),
    (
        "grafana-needs-prometheus",
        "both-off",
        [(("observability",), {"prometheus": False, "grafana": False})],
    ),
    ("az-region", "zone-f", [(("network", "availabilityZone"), "us-east-1f")]),
    ("cidr-invalid", "slash-20", [(("network", "vpcCidr"), "172.16.0.0/20")]),
    ("cidr-world-open", "no-ssh", [(("network", "sshCidr"), DELETE)]),
    ("cidr-world-open", "host", [(("network", "sshCidr"), "203.0.113.7/32")]),
    (
        "vpc-choice",
        "existing",
        [
            (("network", "vpcCidr"), DELETE),
            (("network", "vpcId"), "vpc-0a1b2c3d4e5f60718"),
            (("network", "subnetId"), "subnet-0a1b2c3d"),
        ],
    ),
    (
        "vpc-choice",
        "existing-eks",
        [
            (("scheduler",), "kubernetes"),
            (("network", "vpcCidr"), DELETE),
            (("network", "vpcId"), "vpc-0a1b2c3d4e5f60718"),
            (("network", "subnetId"), "subnet-0a1b2c3d"),
            (("network", "secondarySubnetId"), "subnet-0a1b2c3e"),
        ],
    ),
    (
        "pool-names",
        "two-pools",
        [(("compute", "gpuPools", 1), {"name": "eval", "instanceType": "p5.4xlarge", "count": 1})],
    ),
    ("instance-type", "b300", [((*POOL, "instanceType"), "p6-b300.48xlarge")]),
    (
        "node-instance-type",
        "uncatalogued",
        [(("compute", "headNode", "instanceType"), "r7i.2xlarge")],
    ),
    ("pool-count", "autoscaling", [ON_DEMAND, ((*POOL, "minCount"), 0)]),
    (
        "efa-unsupported",
        "off",
        [ON_DEMAND, ((*POOL, "instanceType"), "g6e.xlarge"), ((*POOL, "efa"), False)],
    ),
    (
        "efa-unsupported",
        "default",
        [ON_DEMAND, ((*POOL, "instanceType"), "g6e.xlarge"), ((*POOL, "efa"), DELETE)],
    ),
    (
        "reservation-id",
        "odcr-short-id",
        [((*POOL, "capacity"), {"type": "reservation", "reservationId": "cr-0123abcd"})],
    ),
    ("reservation-id", "spot", [((*POOL, "capacity"), {"type": "spot"})]),
    ("capacity-block", "fixed", [((*POOL, "minCount"), 16)]),
    ("capacity-block", "no-signal", [((*POOL, "capacity", "checkpointSignal"), "none")]),
    (
        "capacity-block",
        "signal-on-eks",
        [(("scheduler",), "kubernetes"), ((*POOL, "capacity", "checkpointSignal"), "USR2")],
    ),
    ("cost-idle", "alert", [(("cost",), {"idle": {"after": "2h"}})]),
    ("cost-idle", "scale-down", [ON_DEMAND, (("cost",), {"idle": {"action": "scale-down"}})]),
    (
        "cost-idle",
        "eks-scale-down",
        [
            ON_DEMAND,
            (("scheduler",), "kubernetes"),
            (("cost",), {"idle": {"action": "scale-down"}}),
        ],
    ),
    (
        "cost-idle",
        "same-idle-time",
        [
            ON_DEMAND,
            (("slurm", "scaledownIdletime"), 60),
            (("cost",), {"idle": {"after": "1h", "action": "scale-down"}}),
        ],
    ),
    ("placement-group", "on-demand", [ON_DEMAND, ((*POOL, "placementGroup"), True)]),
    (
        "placement-group",
        "gb200-default",
        [*GB200, ((*POOL, "placementGroup"), DELETE), (HEAD, DELETE)],
    ),
    ("fsx-capacity", "p2-1200", [((*FSX, "capacityGiB"), 1200)]),
    (
        "fsx-capacity",
        "scratch1-7200",
        [
            ((*FSX, "deploymentType"), "SCRATCH_1"),
            ((*FSX, "throughputPerTiB"), DELETE),
            ((*FSX, "capacityGiB"), 7200),
        ],
    ),
    (
        "fsx-capacity",
        "scratch1-2400",
        [
            ((*FSX, "deploymentType"), "SCRATCH_1"),
            ((*FSX, "throughputPerTiB"), DELETE),
            ((*FSX, "capacityGiB"), 2400),
        ],
    ),
    (
        "fsx-throughput",
        "p1-50",
        [((*FSX, "deploymentType"), "PERSISTENT_1"), ((*FSX, "throughputPerTiB"), 50)],
    ),
    ("fsx-throughput", "p2-1000", [((*FSX, "throughputPerTiB"), 1000)]),
    ("fsx-s3", "import-only", [((*FSX, "s3"), {"importPath": "s3://my-datasets/llm"})]),
    (
        "api-private",
        "api-cidrs",
        [(("scheduler",), "kubernetes"), (("network", "apiCidrs"), ["198.51.100.0/24"])],
    ),
    ("api-private", "slurm", []),
    # Written out empty: private on purpose (fmctl runs inside the VPC).
    (
        "api-private",
        "said-private",
        [(("scheduler",), "kubernetes"), (("network", "apiCidrs"), [])],
    ),
    # Beside the data, or a prefix that only starts the same: a second, export-only link.
    (
        "fsx-export-under-import",
        "beside",
        [((*FSX, "s3", "exportPath"), "s3://my-datasets/llm-checkpoints")],
    ),
    # The same prefix both ways is what the user asked for.
    ("fsx-export-under-import", "same", [((*FSX, "s3", "exportPath"), "s3://my-datasets/llm")]),
    ("fsx-two-way", "apart", [((*FSX, "s3", "exportPath"), "s3://my-datasets/llm-out")]),
    ("pool-labels", "prefixed", [((*POOL, "labels"), {"team.example.com/role": "trainer"})]),
    ("fsx-existing", "id-only", [((*FSX,), {"fileSystemId": "fs-0123456789abcdef0"})]),
    ("mount-path", "nested", [((*FSX, "mountPath"), "/mnt/fsx")]),
    ("log-retention", "two-weeks", [(("kubernetes", "controlPlaneLogDays"), 14)]),
    (
        "gitops-repo",
        "forms",
        [(("gitops",), {"repoUrl": "git@github.com:acme/clusters.git", "path": "eks/a"})],
    ),
    (
        "gitops-repo",
        "gitops-with-repo",
        [
            (("scheduler",), "kubernetes"),
            (("network", "apiCidrs"), []),
            (("kubernetes", "inClusterStack"), "gitops"),
            (("gitops",), {"repoUrl": "https://github.com/acme/clusters.git"}),
        ],
    ),
    (
        "head-node-ssh",
        "key-with-cidr",
        [(("compute", "headNode"), {"instanceType": "m7i.4xlarge", "keyName": "ops"})],
    ),
    (
        "fsx-retain",
        "existing-vpc",
        [
            ((*FSX, "deletionPolicy"), "retain"),
            (
                ("network",),
                {
                    "availabilityZone": "us-east-1a",
                    "vpcId": "vpc-0123456789abcdef0",
                    "subnetId": "subnet-0123456789abcdef0",
                    "publicSubnetId": "subnet-0123456789abcdef1",
                    "sshCidr": "198.51.100.0/24",
                },
            ),
        ],
    ),
    ("local-nvme", "p5", []),
    ("pcs-settings", "pcs-plain", PCS),
    ("pcs-names", "plain", PCS),
    ("pcs-version", "supported", [*PCS, (("slurm", "pcs"), {"slurmVersion": "25.11"})]),
    (
        "pcs-version",
        "no-sample-own-ami",
        [
            *PCS,
            (("slurm", "pcs"), {"slurmVersion": "26.05"}),
            (("slurm", "amiId"), "ami-0123456789abcdef0"),
        ],
    ),
    ("pcs-region", "listed", PCS),
    ("pcs-size", "fits", [*PCS, (("slurm", "pcs"), {"size": "SMALL", "loginCount": 2})]),
    (
        "pcs-custom-settings",
        "select-type",
        [*PCS, (("slurm", "pcs"), {"customSettings": {"SelectTypeParameters": "CR_Core"}})],
    ),
]


def _apply(base: dict[str, Any], edits: list[Edit]) -> dict[str, Any]:
    data = base
    for path, value in edits:
        data = set_path(data, path, value)
    return data


@pytest.mark.parametrize(
    ("code", "case", "edits", "where", "level"), FAILING, ids=[f"{c[0]}:{c[1]}" for c in FAILING]
)
def test_rule_rejects(
    base: dict[str, Any], code: str, case: str, edits: list[Edit], where: str, level: str
) -> None:
    result = validate_data(_apply(base, edits))
    found = [(p.dotted_path, p.level) for p in result.problems if p.code == code]
    assert (where, level) in found, [(p.code, p.dotted_path, p.message) for p in result.problems]
    hit = next(p for p in result.problems if p.code == code and p.dotted_path == where)
    assert hit.hint, f"{code} must tell the user what to do"
    if level == "error":
        assert not result.ok
    pos = result.position(hit)
    assert pos.line > 1, "the problem must point into the file, not at its top"


@pytest.mark.parametrize(
    ("code", "case", "edits"), PASSING, ids=[f"{c[0]}:{c[1]}" for c in PASSING]
)
def test_rule_accepts(base: dict[str, Any], code: str, case: str, edits: list[Edit]) -> None:
    result = validate_data(_apply(base, edits))
    assert [p for p in result.problems if p.code == code] == []
    assert result.ok, [(p.code, p.dotted_path, p.message) for p in result.problems]


def test_every_rule_has_cases() -> None:
    codes = all_codes()
    assert {c[0] for c in FAILING} == codes
    assert {c[0] for c in PASSING} == codes


def test_base_spec_is_clean(base: dict[str, Any]) -> None:
    assert validate_data(base).problems == []


# -- EKS's release calendar ---------------------------------------------------------------


def _version_problems(version: str, today: date) -> list[Problem]:
    """The version rule alone, on the EKS example at ``version``, judged on ``today``."""
    doc = yaml.safe_load((ROOT / "examples/p5en-eks-fsx-s3.yaml").read_text())
    spec = validate_data(doc, "kubernetes").resolved
    assert spec is not None
    spec = spec.model_copy(
        update={"kubernetes": spec.kubernetes.model_copy(update={"version": version})}
    )
    ctx = RuleContext(catalog=load_catalog(), scheduler="kubernetes", today=today)
    return list(kubernetes_version(spec, ctx))


def test_eks_versions_by_the_calendar() -> None:
    """Standard support: nothing to say; extended: a warning with the cost; past it: refused."""
    assert _version_problems("1.35", date(2026, 12, 1)) == []
    (warning,) = _version_problems("1.33", date(2026, 12, 1))
    assert warning.level == "warning" and "2026-07-29" in warning.message
    assert "$0.60" in (warning.hint or "")
    (error,) = _version_problems("1.30", date(2026, 12, 1))
    assert error.level == "error" and "2026-07-23" in error.message
    assert _version_problems("1.33", date(2026, 7, 28)) == []


def _pcs_problems(version: str, today: date, **pool: Any) -> list[Problem]:
    """The PCS version and driver rules alone, on a PCS spec at ``version``, on ``today``."""
    from provisioner.validate.rules.pcs import pcs_driver, pcs_version

    doc = yaml.safe_load((ROOT / "examples/p5-slurm-capacity-block.yaml").read_text())
    doc["slurm"] = {"provider": "pcs"}
    doc["compute"]["gpuPools"][0].update(pool)
    spec = validate_data(doc).resolved
    assert spec is not None
    slurm = spec.slurm.model_copy(
        update={"pcs": spec.slurm.pcs.model_copy(update={"slurm_version": version})}
    )
    spec = spec.model_copy(update={"slurm": slurm})
    ctx = RuleContext(catalog=load_catalog(), scheduler="slurm", today=today)
    return [*pcs_version(spec, ctx), *pcs_driver(spec, ctx)]


def test_pcs_versions_by_their_end_of_life() -> None:
    """Past end of life: refused with the date (PCS creates no cluster on it); within 90
    days of it: a warning; the day of it is still allowed (creation ends after the date)."""
    (error,) = _pcs_problems("24.11", date(2026, 12, 3))
    assert error.level == "error" and "2026-05-31" in error.message
    assert '"25.11"' in (error.hint or "")
    (warning,) = _pcs_problems("25.05", date(2026, 10, 1))
    assert warning.level == "warning" and "2026-11-30" in warning.message
    assert _pcs_problems("25.05", date(2026, 9, 1)) == []
    assert [p.level for p in _pcs_problems("25.05", date(2026, 11, 30))] == ["warning"]
    assert [p.level for p in _pcs_problems("25.05", date(2026, 12, 1))] == ["error"]


def test_pcs_default_version_is_alive_with_a_sample_ami() -> None:
    """The default is the newest version PCS still creates clusters on and publishes a sample
    AMI for, on the day: 24.11 in 2025, 25.11 once 24.11 and 25.05 are past their ends."""
    from provisioner.catalog.pcs import SLURM_RELEASES, default_slurm_version

    assert default_slurm_version(date(2026, 12, 3)) == "25.11"
    today = SLURM_RELEASES[defaults.pcs_slurm_version()]
    assert today.life(date.today()) != "ended" and today.sample_os is not None
    assert _pcs_problems(defaults.pcs_slurm_version(), date.today()) == []


def test_blackwell_on_pcs_needs_an_r570_driver() -> None:
    """B200/B300/GB200 pools on a sample AMI with driver 550 are refused (every node would
    drain); 25.11's sample AMI has 590; H100 pools are not judged."""
    (error,) = [
        p
        for p in _pcs_problems("25.05", date(2026, 9, 1), instanceType="p6-b300.48xlarge")
        if p.code == "pcs-driver"
    ]
    assert "550.127.08" in error.message and '"25.11"' in (error.hint or "")
    assert _pcs_problems("25.11", date(2026, 12, 3), instanceType="p6-b200.48xlarge") == []
    assert _pcs_problems("25.05", date(2026, 9, 1)) == []


def test_the_default_version_is_in_standard_support_today() -> None:
    """Fails on the day the default leaves standard support: move it, with the calendar."""
    release = CALENDAR[defaults.KUBERNETES_VERSION]
    assert release.support(date.today()) == "standard", (
        f"default {release.version} left standard support on {release.end_of_standard}: "
        "pick a newer default in provisioner/spec/defaults.py"
    )


def test_an_arm64_fleet_gets_an_arm64_head_node(base: dict[str, Any]) -> None:
    """The head node's default follows the pools' architecture (ParallelCluster refuses a
    mix); a head node written out is kept."""
    arm = validate_data(_apply(base, [*GB200, (HEAD, DELETE)]))
    assert arm.ok and arm.resolved is not None
    assert arm.resolved.compute.head_node.instance_type == defaults.HEAD_NODE_INSTANCE_TYPE_ARM64
    x86 = validate_data(_apply(base, [(HEAD, DELETE)]))
    assert x86.resolved is not None
    assert x86.resolved.compute.head_node.instance_type == defaults.HEAD_NODE_INSTANCE_TYPE


@pytest.mark.parametrize(
    "key",
    ["workload", "team.example.com/role", "a", "x_y.z-1", "acme.io/" + "n" * 55],
)
def test_node_labels_kubernetes_and_eks_take(key: str) -> None:
    from provisioner.validate.rules.compute import label_problem

    assert label_problem(key, "training") is None


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("kubernetes.io/role", "gpu", "prefix EKS reserves"),
        ("node-role.kubernetes.io/gpu", "true", "prefix EKS reserves"),
        ("topology.k8s.io/zone", "a", "prefix EKS reserves"),
        ("eks.amazonaws.com/nodegroup", "x", "prefix EKS reserves"),
        ("fmctl.dev/pool", "other", "fmctl's own"),
        ("-leading-dash", "x", "not a Kubernetes label key"),
        ("Upper.Case/x", "y", "not a Kubernetes label key"),
        ("a" * 64, "x", "not a Kubernetes label key"),
        ("acme.io/" + "n" * 56, "x", "64 characters"),
        ("workload", "", "not a Kubernetes label value"),
        ("workload", "pre training", "not a Kubernetes label value"),
        ("workload", "v" * 64, "not a Kubernetes label value"),
    ],
)
def test_node_labels_they_refuse(key: str, value: str, says: str) -> None:
    from provisioner.validate.rules.compute import label_problem

    found = label_problem(key, value)
    assert found is not None and says in found[0], found


def test_a_ttl_read_as_a_number_gets_a_lifetime_hint() -> None:
    from tests.conftest import validate_text

    text = (ROOT / "tests/data/bad-specs/106-ttl-without-unit.yaml").read_text()
    found = validate_text(text)
    (ttl,) = [p for p in found.problems if p.path == ("metadata", "ttl")]
    assert ttl.hint is not None and 'ttl: "8h"' in ttl.hint and "version" not in ttl.hint


def test_the_same_import_and_export_prefix_warns_that_deletes_flow_both_ways() -> None:
    from tests.conftest import validate_text

    text = (ROOT / "tests/data/bad-specs/106-ttl-without-unit.yaml").read_text()
    found = validate_text(text.replace("  ttl: 8\n", ""))
    (two_way,) = [p for p in found.problems if p.code == "fsx-two-way"]
    assert two_way.level == "warning" and "deletes flow both ways" in two_way.message
    assert found.ok  # a warning: the spec is valid
    apart = text.replace("  ttl: 8\n", "").replace(
        "exportPath: s3://acme-ml-data/corpora/", "exportPath: s3://acme-ml-data/out"
    )
    assert not [p for p in validate_text(apart).problems if p.code == "fsx-two-way"]


def test_pcs_lacks_nothing_of_the_health_loop(base: dict[str, Any]) -> None:
    """The health loop is whole on PCS (a node the agent drains is replaced through its
    nodeBootstrapped stage: tests/engine/test_pcs_agent.py), so turning it on adds nothing
    to what a PCS spec is told it lacks."""

    def said(edits: list[Edit]) -> str:
        result = validate_data(_apply(base, [*PCS, *edits]))
        (found,) = [p for p in result.problems if p.code == "pcs-lacks"]
        return found.message

    on, off = said([]), said([(("health", "enabled"), False)])
    assert on == off and "no Slurm exporter" in on
