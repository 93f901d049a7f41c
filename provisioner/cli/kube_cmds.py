"""`fmctl token` (the kubeconfig's credential plugin) and what `up` and `status` print about
a Kubernetes cluster: its kubeconfig, nodes per pool with GPU and EFA allocatable, the
add-ons, the stack's health and how to reach Grafana."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from provisioner.cli.engine_cmds import GuardedCommand, _target
from provisioner.cli.options import region_option, target_options


@click.command("token", cls=GuardedCommand)
@click.option("--cluster", "cluster", required=True, help="The EKS cluster's name.")
@region_option
@target_options
def token(cluster: str, region: str, sandbox: bool, state_dir: str | None) -> None:
    """Print an ExecCredential for the cluster's API (kubectl runs this; it lasts ~15 min)."""
    from provisioner.drivers.eks_auth import exec_credential
    from provisioner.drivers.eks_auth import token as make_token

    target = _target(region, state_dir, sandbox)
    click.echo(json.dumps(exec_credential(make_token(target.aws(), cluster), time.time())))


def kubernetes_summary(name: str, target: Any, kubeconfig: str | None) -> None:
    """Nodes per pool (GPU/EFA allocatable), add-ons, the stack's health, and access."""
    from provisioner.ops.engine import make_engine
    from provisioner.plan.eks import EksCluster
    from provisioner.plan.kube_stack import EFA, GPU, connect
    from provisioner.render.context import POOL_LABEL

    engine = make_engine(target, name, None, lambda e: None)
    cluster = EksCluster()._describe(engine)
    if cluster is None:
        return
    click.echo(f"EKS {name}: {cluster['status']}, Kubernetes {cluster.get('version')}")
    eks = engine.aws.client("eks")
    for addon in eks.list_addons(clusterName=name)["addons"]:
        item = eks.describe_addon(clusterName=name, addonName=addon)["addon"]
        click.echo(f"  add-on {addon:<24} {item['addonVersion']:<22} {item['status']}")
    if cluster["status"] != "ACTIVE":
        return
    api = connect(engine, cluster["endpoint"], cluster["certificateAuthority"]["data"])
    try:
        pools: dict[str, list[dict[str, Any]]] = {}
        for node in api.list("v1", "Node"):
            labels = node["metadata"].get("labels", {})
            pool = labels.get(POOL_LABEL) or labels.get("eks.amazonaws.com/nodegroup", "?")
            pools.setdefault(pool, []).append(node)
        for pool, nodes in sorted(pools.items()):
            click.echo(f"  pool {pool}: {len(nodes)} nodes")
            for n in nodes:
                alloc = n.get("status", {}).get("allocatable", {})
                ready = any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in n.get("status", {}).get("conditions", [])
                )
                click.echo(
                    f"    {n['metadata']['name']:<34} {'Ready' if ready else 'NotReady':<9} "
                    f"gpu {alloc.get(GPU, '0'):>2}  efa {alloc.get(EFA, '0'):>2}"
                )
        _stack_health(api)
    finally:
        close = getattr(api, "close", None)
        if close:
            close()
    _kube_access(name, target.region, kubeconfig)


def _stack_health(api: Any) -> None:
    """DaemonSets and Deployments fmctl applied, ready or not."""
    from provisioner.plan.context import OWNER_TAG

    rows = []
    for api_version, kind in (("apps/v1", "DaemonSet"), ("apps/v1", "Deployment")):
        for obj in api.list(api_version, kind, selector="app.kubernetes.io/managed-by=fmctl"):
            if OWNER_TAG not in obj["metadata"].get("labels", {}):
                continue
            status = obj.get("status", {})
            want = status.get("desiredNumberScheduled", obj.get("spec", {}).get("replicas", 1))
            ready = status.get("numberReady", status.get("readyReplicas", 0))
            meta = obj["metadata"]
            rows.append(f"    {kind} {meta['namespace']}/{meta['name']}: {ready}/{want} ready")
    if rows:
        click.echo("  stack:")
        for row in rows:
            click.echo(row)


def _kube_access(name: str, region: str, kubeconfig: str | None) -> None:
    from provisioner.drivers.eks_auth import context_name

    where = f"KUBECONFIG={kubeconfig} " if kubeconfig else ""
    context = context_name(name, region)
    click.echo(f"kubectl: {where}kubectl --context {context} get nodes")
    click.echo(
        f"grafana: {where}kubectl --context {context} -n monitoring port-forward "
        "svc/grafana 3000:3000  then http://localhost:3000 (user admin; the password is in "
        "the grafana-admin Secret, never on this machine)"
    )
