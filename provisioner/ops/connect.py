"""`fmctl connect`: the command that opens a shell on a cluster's node, or forwards Grafana.

Sessions go through SSM Session Manager (`aws ssm start-session`, with the Session Manager
plugin): no port opened, no key needed; the head node by SSH instead where the spec gives a
key pair and an sshCidr to come from. Nodes are found by what AWS and Kubernetes say, never
by a local file: the Slurm head node by the tags ParallelCluster puts on it, an EKS node by
its Node object's providerID (``aws:///ZONE/INSTANCE-ID``, as the AWS cloud provider writes
it), any node by its instance id or private DNS name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from provisioner.drivers.aws import AwsError
from provisioner.ops.target import Target, kubeconfig_path, make_context
from provisioner.render.context import os_login_user
from provisioner.spec.model import ClusterSpec

#: Grafana's port, on the head node and as the Service's.
GRAFANA_PORT = 3000


class NoSuchNode(AwsError):
    """What `connect` was asked to reach is not there."""


@dataclass(frozen=True)
class Connection:
    """The command to run, and what it reaches (for the line said before it runs)."""

    argv: tuple[str, ...]
    reaches: str


def _ssm(instance: str, region: str) -> tuple[str, ...]:
    return ("aws", "ssm", "start-session", "--target", instance, "--region", region)


def _forward(instance: str, region: str, remote: int, local: int) -> tuple[str, ...]:
    parameters = f'{{"portNumber":["{remote}"],"localPortNumber":["{local}"]}}'
    return (
        *_ssm(instance, region),
        "--document-name",
        "AWS-StartPortForwardingSession",
        "--parameters",
        parameters,
    )


def _instance(ctx: Any, filters: list[dict[str, Any]]) -> dict[str, Any] | None:
    found = ctx.aws.client("ec2").describe_instances(
        Filters=[*filters, {"Name": "instance-state-name", "Values": ["running"]}]
    )
    items = [i for r in found["Reservations"] for i in r["Instances"]]
    return items[0] if items else None


def _eks_nodes(target: Target, name: str, cluster: Mapping[str, Any]) -> list[dict[str, Any]]:
    from provisioner.resources.kube_api import connect as kube_connect

    ctx = make_context(target, name, read_only=True)
    api = kube_connect(ctx, cluster["endpoint"], cluster["certificateAuthority"]["data"])
    try:
        return list(api.list("v1", "Node"))
    finally:
        close = getattr(api, "close", None)
        if close is not None:
            close()


def connection(
    target: Target,
    name: str,
    node: str | None,
    head: bool,
    login: bool,
    forward: int | None,
    spec: ClusterSpec | None,
) -> Connection:
    """What `fmctl connect` runs for cluster ``name`` (``spec``: the one `up` last applied,
    for the head node's SSH settings). An `aws` command names the endpoint the target
    reaches when it is not AWS (the sandbox, AWS_ENDPOINT_URL), and its CA bundle: the
    same session asked of AWS would name an instance AWS never heard of."""
    found = _connection(target, name, node, head, login, forward, spec)
    if found.argv[:1] != ("aws",) or not target.endpoint:
        return found
    extra: tuple[str, ...] = ("--endpoint-url", target.endpoint)
    if target.ca_bundle:
        extra += ("--ca-bundle", target.ca_bundle)
    return Connection((*found.argv, *extra), found.reaches)


def _connection(
    target: Target,
    name: str,
    node: str | None,
    head: bool,
    login: bool,
    forward: int | None,
    spec: ClusterSpec | None,
) -> Connection:
    from provisioner.resources.eks import EksCluster

    ctx = make_context(target, name, read_only=True)
    region = target.region
    from provisioner.resources.pcs import cluster_id

    pcs = cluster_id(ctx)
    if pcs is not None:
        return _pcs_connection(ctx, name, pcs, node, head, forward, spec)
    if login:
        raise NoSuchNode(
            f"{name} has no login nodes: fmctl's ParallelCluster clusters have a head node",
            hint=f"`fmctl connect {name} --head`",
        )
    cluster = EksCluster().describe(ctx)
    if cluster is not None:
        if head:
            raise NoSuchNode(
                f"{name} is an EKS cluster: it has no head node",
                hint=f"name a node (`kubectl get nodes`), or `fmctl connect {name} "
                f"--port-forward {GRAFANA_PORT}` for Grafana",
            )
        if forward is not None and node is None:
            from provisioner.drivers.eks_auth import context_name

            config = str(kubeconfig_path(target, name))
            argv: tuple[str, ...] = (
                "kubectl",
                "--kubeconfig",
                config,
                "--context",
                context_name(name, region),
                "-n",
                "monitoring",
                "port-forward",
                "svc/grafana",
                f"{forward}:{GRAFANA_PORT}",
            )
            return Connection(argv, f"Grafana of {name} at http://localhost:{forward}")
        if node is None:
            raise NoSuchNode(
                f"which node of {name}?",
                hint="name one (`kubectl get nodes`), or --port-forward 3000 for Grafana",
            )
        nodes = _eks_nodes(target, name, cluster)
        match = next((n for n in nodes if n["metadata"]["name"] == node), None)
        provider = (match or {}).get("spec", {}).get("providerID", "")
        instance = provider.rsplit("/", 1)[-1] if provider.startswith("aws://") else node
        if match is None and not node.startswith("i-"):
            known = ", ".join(sorted(n["metadata"]["name"] for n in nodes)[:8])
            raise NoSuchNode(
                f"{name} has no node {node}",
                hint=f"its nodes: {known}" if known else "it has no nodes yet",
            )
        return _node(instance, region, forward, node)
    # Slurm: ParallelCluster's head node, or a node by instance id / private DNS name.
    if node is None or head:
        found = _instance(
            ctx,
            [
                {"Name": "tag:parallelcluster:cluster-name", "Values": [name]},
                {"Name": "tag:parallelcluster:node-type", "Values": ["HeadNode"]},
            ],
        )
        if found is None:
            raise NoSuchNode(
                f"no cluster {name} with a running head node in {region}",
                hint=f"`fmctl status {name}` shows what exists",
            )
        return _login(found, f"the head node of {name}", region, forward, spec)
    key_name = "instance-id" if node.startswith("i-") else "private-dns-name"
    found = _instance(
        ctx,
        [
            {"Name": "tag:parallelcluster:cluster-name", "Values": [name]},
            {"Name": key_name, "Values": [node]},
        ],
    )
    if found is None:
        raise NoSuchNode(
            f"{name} has no running node {node} in {region}",
            hint="name it by instance id or private DNS name (`fmctl status` lists them)",
        )
    return _node(str(found["InstanceId"]), region, forward, node)


def _login(
    found: dict[str, Any],
    what: str,
    region: str,
    forward: int | None,
    spec: ClusterSpec | None,
) -> Connection:
    """A shell on the node users log in to (the head node, or a PCS login node), or Grafana
    on it forwarded: SSH where the spec gives a key pair and sshCidr, else SSM."""
    instance = str(found["InstanceId"])
    if forward is not None:
        return Connection(
            _forward(instance, region, GRAFANA_PORT, forward),
            f"Grafana on {what} at http://localhost:{forward}",
        )
    key = spec.compute.head_node.key_name if spec else None
    address = found.get("PublicIpAddress") or found.get("PrivateIpAddress")
    if spec is not None and key and spec.network.ssh_cidr and address:
        argv = ("ssh", "-i", f"~/.ssh/{key}.pem", f"{os_login_user(spec.slurm.os)}@{address}")
        return Connection(argv, f"{what} ({instance}) over SSH")
    return Connection(_ssm(instance, region), f"{what} ({instance})")


def _pcs_connection(
    ctx: Any,
    name: str,
    pcs: str,
    node: str | None,
    head: bool,
    forward: int | None,
    spec: ClusterSpec | None,
) -> Connection:
    """On AWS PCS: a login node (PCS's cluster tag, fmctl's pool tag ``login``), or a node of
    the cluster by instance id or private DNS name. AWS runs the controller: no head node."""
    from provisioner.catalog.pcs import CLUSTER_TAG

    region = ctx.region
    if head:
        raise NoSuchNode(
            f"{name} runs on AWS PCS: AWS runs its Slurm controller, there is no head node",
            hint=f"`fmctl connect {name} --login`",
        )
    mine = [{"Name": f"tag:{CLUSTER_TAG}", "Values": [pcs]}]
    if node is None:
        found = _instance(ctx, [*mine, {"Name": "tag:fmctl.dev/pool", "Values": ["login"]}])
        if found is None:
            raise NoSuchNode(
                f"{name} has no running login node in {region}",
                hint=f"`fmctl status {name}` shows its node groups",
            )
        return _login(found, f"the login node of {name}", region, forward, spec)
    key_name = "instance-id" if node.startswith("i-") else "private-dns-name"
    found = _instance(ctx, [*mine, {"Name": key_name, "Values": [node]}])
    if found is None:
        raise NoSuchNode(
            f"{name} has no running node {node} in {region}",
            hint="name it by instance id or private DNS name (`fmctl status` lists them)",
        )
    return _node(str(found["InstanceId"]), region, forward, node)


def _node(instance: str, region: str, forward: int | None, node: str) -> Connection:
    if forward is not None:
        return Connection(
            _forward(instance, region, forward, forward),
            f"port {forward} of {node} at localhost:{forward}",
        )
    return Connection(_ssm(instance, region), f"{node} ({instance})")
