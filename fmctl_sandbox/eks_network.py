"""What EKS and its nodes leave in the cluster's VPC, made in moto's EC2 so that fmctl's
teardown meets it as it would in AWS (``ec2_mend`` refuses to delete a subnet, group or VPC
something still uses).

- The cluster security group EKS creates (``eks-cluster-sg-NAME-ID``, tagged
  ``aws:eks:cluster-name`` and ``kubernetes.io/cluster/NAME: owned``) and the control plane's
  network interfaces in the cluster's subnets ("Amazon EKS NAME", with the cluster group and
  the groups the call named): EKS's docs, "Amazon EKS security group requirements" and
  "VPC and subnet requirements". Both go when the cluster is gone.
- The VPC CNI's interfaces: one per node, in the node group's subnet, described
  ``aws-K8S-i-…`` and tagged ``cluster.k8s.amazonaws.com/name`` and
  ``node.k8s.amazonaws.com/instance_id`` (amazon-vpc-cni-k8s, ``pkg/awsutils``), with the
  node's groups. When a node leaves they are left behind, available: the worst case the CNI
  has (its ipamd killed before it cleans up), which `down` must sweep.
- The AWS Load Balancer Controller's leftovers: a LoadBalancer Service or an Ingress, while
  the controller runs in the cluster (a Deployment ``aws-load-balancer-controller`` and a
  node group to run it), gets a load balancer's interface in the cluster's first subnet, a
  frontend group per load balancer and the shared backend group
  ``k8s-traffic-CLUSTER-HASH`` (tags ``elbv2.k8s.aws/cluster`` and ``elbv2.k8s.aws/resource:
  backend-sg``; the controller's docs, "Security Groups for Load Balancers"). Deleting the
  Service removes its interface and frontend group; the backend group goes with the last
  load balancer, unless the controller no longer runs by then.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from typing import Any

CNI_TAG = "cluster.k8s.amazonaws.com/name"
NODE_TAG = "node.k8s.amazonaws.com/instance_id"
LB_TAG = "elbv2.k8s.aws/cluster"


def _backend(account: str, region: str) -> Any:
    from moto.ec2.models import ec2_backends

    return ec2_backends[account][region]


def _drop_group(backend: Any, group_id: str) -> None:
    """Delete a group the service itself made (EKS or the controller: AWS lets it)."""
    for vpc_id, groups in backend.groups.items():
        if group_id in groups:
            backend._delete_security_group(vpc_id, group_id)
            return


def _drop_interface(backend: Any, eni_id: str) -> None:
    if eni_id in backend.enis:
        backend.enis[eni_id].delete()


@dataclass
class ClusterNetwork:
    """One cluster's footprint in its VPC."""

    group: str
    control_plane: list[str]
    subnets: list[str]
    #: (node group, node name) -> the node's CNI interface.
    nodes: dict[tuple[str, str], str] = field(default_factory=dict)
    #: (namespace, kind, name) -> (interface, frontend group) of a load balancer.
    balancers: dict[tuple[str, str, str], tuple[str, str]] = field(default_factory=dict)
    backend_group: str | None = None


def create_cluster(
    account: str, region: str, name: str, vpc_id: str, subnets: list[str], groups: list[str]
) -> ClusterNetwork:
    """The cluster security group and the control plane's interfaces."""
    backend = _backend(account, region)
    sg = backend.create_security_group(
        f"eks-cluster-sg-{name}-{uuid.uuid4().hex[:10]}",
        "EKS created security group applied to ENI that is attached to EKS Control Plane "
        "master nodes, as well as any managed workloads.",
        vpc_id=vpc_id,
        tags={"aws:eks:cluster-name": name, f"kubernetes.io/cluster/{name}": "owned"},
    )
    enis = []
    for subnet in subnets:
        eni = backend.create_network_interface(
            backend.get_subnet(subnet),
            None,
            group_ids=[sg.id, *groups],
            description=f"Amazon EKS {name}",
        )
        eni.status, eni.requester_managed = "in-use", True
        enis.append(str(eni.id))
    return ClusterNetwork(str(sg.id), enis, list(subnets))


def delete_cluster(account: str, region: str, net: ClusterNetwork) -> None:
    """EKS removes its interfaces and group with the cluster (what nodes and load balancers
    left stays)."""
    backend = _backend(account, region)
    for eni in net.control_plane:
        _drop_interface(backend, eni)
    # Load balancers outlive their cluster (they are billed until deleted): theirs stay.
    _drop_group(backend, net.group)


def sync_nodes(
    account: str,
    region: str,
    cluster: str,
    net: ClusterNetwork,
    nodegroup: str,
    nodes: list[str],
    subnet: str,
    groups: list[str],
) -> None:
    """Each node of a group gets its CNI interface; nodes no longer there leave theirs."""
    backend = _backend(account, region)
    for node in nodes:
        if (nodegroup, node) in net.nodes:
            continue
        instance = f"i-{hashlib.sha256(node.encode()).hexdigest()[:17]}"
        eni = backend.create_network_interface(
            backend.get_subnet(subnet),
            None,
            group_ids=groups or [net.group],
            description=f"aws-K8S-{instance}",
            tags={CNI_TAG: cluster, NODE_TAG: instance},
        )
        eni.status = "in-use"
        net.nodes[(nodegroup, node)] = str(eni.id)
    leave(account, region, net, nodegroup, keep=set(nodes))


def leave(
    account: str, region: str, net: ClusterNetwork, nodegroup: str, keep: set[str] | None = None
) -> None:
    """A group's nodes (but those in ``keep``) are gone; their CNI interfaces stay behind,
    available."""
    backend = _backend(account, region)
    for key in [k for k in net.nodes if k[0] == nodegroup and k[1] not in (keep or set())]:
        eni = backend.enis.get(net.nodes.pop(key))
        if eni is not None:
            eni.status = "available"


def sync_balancers(
    account: str,
    region: str,
    cluster: str,
    vpc_id: str,
    net: ClusterNetwork,
    wanted: set[tuple[str, str, str]],
) -> None:
    """The load balancer controller's work, when it runs: one interface and frontend group
    per wanted load balancer, the shared backend group while any exists."""
    backend = _backend(account, region)
    for key in sorted(wanted - set(net.balancers)):
        if net.backend_group is None:
            digest = hashlib.sha256(cluster.encode()).hexdigest()[:10]
            group = backend.create_security_group(
                f"k8s-traffic-{cluster}-{digest}",
                "[k8s] Shared Backend SecurityGroup for LoadBalancer",
                vpc_id=vpc_id,
                tags={LB_TAG: cluster, "elbv2.k8s.aws/resource": "backend-sg"},
            )
            net.backend_group = str(group.id)
        namespace, kind, name = key
        front = backend.create_security_group(
            f"k8s-{namespace}-{name}-{uuid.uuid4().hex[:10]}"[:255],
            f"[k8s] Managed SecurityGroup for LoadBalancer ({kind} {namespace}/{name})",
            vpc_id=vpc_id,
            tags={LB_TAG: cluster, "elbv2.k8s.aws/resource": "ManagedLBSecurityGroup"},
        )
        eni = backend.create_network_interface(
            backend.get_subnet(net.subnets[0]),
            None,
            group_ids=[str(front.id), net.backend_group],
            description=f"ELB net/k8s-{namespace}-{name}",
        )
        eni.status, eni.requester_managed = "in-use", True
        net.balancers[key] = (str(eni.id), str(front.id))
    for key in sorted(set(net.balancers) - wanted):
        eni_id, front_id = net.balancers.pop(key)
        _drop_interface(backend, eni_id)
        _drop_group(backend, front_id)
    if not net.balancers and net.backend_group is not None:
        _drop_group(backend, net.backend_group)
        net.backend_group = None
