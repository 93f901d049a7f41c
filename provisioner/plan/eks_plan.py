"""The nodes a Kubernetes cluster adds to the infrastructure plan.

Order, and why:
- the secrets key, the control plane (10 minutes) as soon as its subnets, group and role
  exist, in parallel with FSx (10 + 7 minutes);
- the node role's access entry and the caller's admin entry once the cluster is ACTIVE;
- launch templates early (seconds, no cost), node groups (5 minutes) in parallel once the
  cluster and the network's NAT route exist (nodes need it to join);
- add-ons once the system node group is ACTIVE (they run pods; GPU groups are tainted, so
  they wait for no GPU group);
- the in-cluster stack once everything it runs on and mounts exists.
"""

from __future__ import annotations

from pathlib import Path

from provisioner.drivers.iam import amp_write_policy
from provisioner.plan.eks import ADDONS, ADMIN_POLICY, FSX_CSI_ACCOUNT
from provisioner.plan.graph import Node
from provisioner.plan.kube_stack import PoolCheck
from provisioner.render.context import ClusterContext
from provisioner.spec.model import ClusterSpec


def _present(nodes: dict[str, Node], *ids: str) -> tuple[str, ...]:
    return tuple(i for i in ids if i in nodes)


def eks_nodes(
    spec: ClusterSpec,
    c: ClusterContext,
    files: dict[str, str],
    nodes: dict[str, Node],
    kubeconfig: Path,
    sandbox_home: Path | None = None,
) -> dict[str, Node]:
    """EKS and in-cluster nodes on top of the infrastructure ``nodes``."""
    out: dict[str, Node] = {}

    def add(node: Node) -> None:
        out[node.id] = node

    key_arn = spec.kubernetes.secrets_key_arn
    if key_arn is None:
        add(Node("kms/secrets", "kms-key"))
    network = _present(nodes, "subnet/private", "subnet/public", "subnet/secondary", "sg/efa")
    add(
        Node(
            "eks",
            "eks-cluster",
            (*network, "iam/eks-cluster", *(() if key_arn else ("kms/secrets",))),
            {"text": files["aws/eks-cluster.yaml"], "key_arn": key_arn},
        )
    )
    add(
        Node(
            "access/nodes",
            "eks-access-entry",
            ("eks", "iam/eks-node"),
            {"principal": "iam/eks-node", "type": "EC2_LINUX"},
        )
    )
    add(
        Node(
            "access/admin",
            "eks-access-entry",
            ("eks",),
            {"principal": "caller", "type": "STANDARD", "policy": ADMIN_POLICY},
        )
    )
    joins = (
        "eks",
        "iam/eks-node",
        "access/nodes",
        *_present(nodes, "subnet/private", "route-table/private", "s3-endpoint"),
    )
    add(
        Node(
            "nodegroup/system",
            "eks-nodegroup",
            joins,
            {"text": files["aws/nodegroups/system.yaml"], "group": "system"},
        )
    )
    for pool in c.pools:
        lt = f"launch-template/{pool.name}"
        add(
            Node(
                lt,
                "launch-template",
                ("sg/efa", *_present(nodes, f"placement-group/{pool.name}")),
                {"text": files[f"aws/launch-templates/{pool.name}.yaml"]},
            )
        )
        add(
            Node(
                f"nodegroup/{pool.name}",
                "eks-nodegroup",
                (*joins, lt),
                {"text": files[f"aws/nodegroups/{pool.name}.yaml"], "group": pool.name},
            )
        )
    pins = spec.kubernetes.addon_versions
    for addon in ADDONS:
        if addon == "aws-fsx-csi-driver" and c.fsx is None:
            continue
        pinned: dict[str, str] = {str(k): v for k, v in pins.items()}
        params: dict[str, object] = {"addon": addon, "version": pinned.get(addon)}
        deps: tuple[str, ...] = ("nodegroup/system",)
        if addon == "aws-fsx-csi-driver":
            add(Node("iam/fsx-csi", "iam-role", params={"role": "fsx-csi"}))
            params.update(role="iam/fsx-csi", service_account=FSX_CSI_ACCOUNT)
            deps = (*deps, "iam/fsx-csi", "addon/eks-pod-identity-agent")
        add(Node(f"addon/{addon}", "eks-addon", deps, params))
    if c.amp_workspace_arn:
        # Prometheus's service account assumes a role that may write to the workspace: made
        # before the stack, so Prometheus starts with credentials.
        add(
            Node(
                "iam/prometheus-amp",
                "iam-role",
                params={"role": "prometheus-amp", "inline": amp_write_policy(c.amp_workspace_arn)},
            )
        )
        add(
            Node(
                "pod-identity/prometheus",
                "eks-pod-identity",
                ("eks", "iam/prometheus-amp", "addon/eks-pod-identity-agent"),
                {
                    "namespace": "monitoring",
                    "service_account": "prometheus",
                    "role": "iam/prometheus-amp",
                },
            )
        )
    pools = [PoolCheck(p.name, p.count, p.gpus, p.efa_devices if p.efa else 0) for p in c.pools]
    stack_deps = (
        *sorted(n for n in out if n.startswith(("nodegroup/", "addon/", "pod-identity/"))),
        "access/admin",
        *_present(nodes, "fsx", "sg/fsx"),
    )
    add(
        Node(
            "kube-stack",
            "kube-stack",
            stack_deps,
            {
                "files": files,
                "pools": pools,
                "kubeconfig": str(kubeconfig),
                "sandbox_home": sandbox_home,
            },
        )
    )
    return out
