"""The infrastructure layer both schedulers share, as a plan built from a resolved spec:
network, security groups, placement groups, the artifact bucket, FSx for Lustre."""

from __future__ import annotations

import ipaddress

from provisioner.plan.graph import Node, Plan
from provisioner.render.context import ClusterContext
from provisioner.shipped import shipped_dir


def _subnet_blocks(cidr: str) -> list[str]:
    """Four equal blocks of the VPC: private (nodes), public, secondary AZ, spare."""
    net = ipaddress.ip_network(cidr)
    return [str(b) for b in net.subnets(prefixlen_diff=2)]


def _network(c: ClusterContext, nodes: list[Node]) -> None:
    if c.vpc_cidr is None:  # reuse: look the VPC and subnet up, never change them
        nodes.append(Node("vpc", "existing-vpc", params={"id": _existing_vpc(c)}, owned=False))
        nodes.append(
            Node(
                "subnet/private", "existing-subnet", ("vpc",), {"id": c.private_subnet}, owned=False
            )
        )
        if c.scheduler == "kubernetes":  # looked up, so a wrong id stops `up` at once
            nodes.append(
                Node(
                    "subnet/secondary",
                    "existing-subnet",
                    ("vpc",),
                    {"id": c.secondary_subnet},
                    owned=False,
                )
            )
        return
    private, public, secondary, _ = _subnet_blocks(c.vpc_cidr)
    nodes += [
        Node("vpc", "vpc", params={"cidr": c.vpc_cidr}),
        Node("igw", "igw", ("vpc",), {"vpc": "vpc"}),
        Node(
            "subnet/private",
            "subnet",
            ("vpc",),
            {"vpc": "vpc", "cidr": private, "az": c.availability_zone},
        ),
        Node(
            "subnet/public",
            "subnet",
            ("vpc",),
            {"vpc": "vpc", "cidr": public, "az": c.availability_zone, "public": True},
        ),
        Node("eip/nat", "eip", ("igw",)),
        Node(
            "natgw",
            "natgw",
            ("subnet/public", "eip/nat", "igw"),
            {"subnet": "subnet/public", "eip": "eip/nat"},
        ),
        Node(
            "route-table/public",
            "route-table",
            ("vpc", "igw", "subnet/public"),
            {"vpc": "vpc", "target": "igw", "subnets": ["subnet/public"]},
        ),
        Node(
            "route-table/private",
            "route-table",
            ("vpc", "natgw", "subnet/private"),
            {"vpc": "vpc", "target": "natgw", "subnets": ["subnet/private"]},
        ),
        Node(
            "s3-endpoint",
            "s3-endpoint",
            ("route-table/private",),
            {"vpc": "vpc", "route_tables": ["route-table/private"]},
        ),
    ]
    if c.scheduler == "kubernetes":
        nodes.append(
            Node(
                "subnet/secondary",
                "subnet",
                ("vpc",),
                {"vpc": "vpc", "cidr": secondary, "avoid_az": c.availability_zone},
            )
        )


def _existing_vpc(c: ClusterContext) -> str:
    vpc = c.existing_vpc_id
    assert vpc is not None
    return vpc


def build_plan(c: ClusterContext) -> Plan:
    """The infrastructure nodes of cluster ``c``."""
    nodes: list[Node] = []
    _network(c, nodes)
    nodes.append(Node("sg/efa", "sg", ("vpc",), {"vpc": "vpc", "role": "efa"}))
    for pool in c.pools:
        if pool.placement_group:
            nodes.append(
                Node(f"placement-group/{pool.name}", "placement-group", params={"pool": pool.name})
            )
    nodes.append(Node("bucket", "bucket"))
    if c.scheduler == "kubernetes":  # ParallelCluster makes its own, scoped by S3Access
        nodes.append(Node("iam/eks-cluster", "iam-role", params={"role": "eks-cluster"}))
        nodes.append(Node("iam/eks-node", "iam-role", params={"role": "eks-node"}))
    if c.scheduler == "slurm" and c.amp_workspace_arn:
        from provisioner.drivers.iam import amp_write_policy

        # aps:RemoteWrite on this workspace only, for the head node's Prometheus.
        document = amp_write_policy(c.amp_workspace_arn)
        nodes.append(
            Node(
                "iam/amp-write", "iam-policy", params={"policy": "amp-write", "document": document}
            )
        )
    if c.scheduler == "slurm":
        from provisioner.render.slurm import monitoring_files

        extra = {k.removeprefix("slurm/"): v for k, v in monitoring_files(c).items()}
        nodes.append(
            Node(
                "artifacts",
                "artifacts",
                ("bucket",),
                {"root": str(shipped_dir("slurm")), "extra": extra},
            )
        )
    fsx = c.fsx
    if fsx is not None and fsx.existing_id:
        nodes.append(Node("fsx", "existing-fsx", params={"id": fsx.existing_id}, owned=False))
    elif fsx is not None:
        nodes.append(
            Node(
                "sg/fsx",
                "sg",
                ("vpc", "sg/efa"),
                {"vpc": "vpc", "role": "fsx", "clients": "sg/efa"},
            )
        )
        nodes.append(
            Node(
                "fsx",
                "fsx",
                ("subnet/private", "sg/fsx"),
                {
                    "subnet": "subnet/private",
                    "security_group": "sg/fsx",
                    "capacity_gib": fsx.capacity_gib,
                    "deployment_type": fsx.deployment_type,
                    "throughput_per_tib": fsx.throughput_per_tib,
                    "import_path": fsx.import_path,
                    "export_path": fsx.export_path,
                },
            )
        )
        if fsx.uses_dra:
            for link in fsx.links:
                nodes.append(
                    Node(
                        f"dra/{link.name}",
                        "dra",
                        ("fsx",),
                        {
                            "fsx": "fsx",
                            "s3_path": link.s3_path,
                            "file_system_path": link.file_system_path,
                            "auto_import": link.auto_import,
                            "auto_export": link.auto_export,
                        },
                    )
                )
    return Plan({n.id: n for n in nodes})
