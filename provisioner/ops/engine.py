"""`fmctl plan / up / down / status`: the engine's use cases, over the sandbox or AWS."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.drivers.aws import Aws
from provisioner.plan.context import CREATED_TAG, EXPIRES_TAG, Engine, Event
from provisioner.plan.graph import Found, Plan, deletion_order
from provisioner.plan.runner import RunResult, run_down, run_up
from provisioner.spec.model import ClusterSpec
from provisioner.state.store import ClusterState


@dataclass
class Target:
    """Where a command runs: the region, and the sandbox's endpoint when sandboxed."""

    region: str
    home: Path
    sandbox: bool = False
    endpoint: str | None = None
    time_scale: float = 1.0
    ca_bundle: str | None = None

    def aws(self) -> Aws:
        """Clients for this target."""
        return Aws(self.region, self.endpoint, self.sandbox, self.ca_bundle)


def target_for(region: str, home: Path, sandbox: bool) -> Target:
    """A target; starts the sandbox emulator when asked and not running."""
    if not sandbox:
        import os

        return Target(region, home, endpoint=os.environ.get("AWS_ENDPOINT_URL"))
    from provisioner.sandbox import daemon

    endpoint, scale, ca = daemon.ensure(home)
    return Target(region, home, True, endpoint, scale, ca)


def _stamp(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def _time_tags(spec: ClusterSpec) -> dict[str, str]:
    """created-at, and expires-at where the spec has a ttl (what `gc` reads)."""
    from provisioner.validate.rules.general import parse_ttl

    now = time.time()
    tags = {CREATED_TAG: _stamp(now)}
    if spec.metadata.ttl is not None:
        tags[EXPIRES_TAG] = _stamp(now + (parse_ttl(spec.metadata.ttl) or 0))
    return tags


def make_engine(
    target: Target, name: str, spec: ClusterSpec | None, on_event: Callable[[Event], None]
) -> Engine:
    """An engine for cluster ``name`` (``spec`` None for tag-only operations)."""
    tags = {**(spec.metadata.tags if spec else {}), **(_time_tags(spec) if spec else {})}
    return Engine(
        aws=target.aws(),
        cluster=name,
        region=target.region,
        tags=tags,
        spec=spec,
        time_scale=target.time_scale,
        on_event=on_event,
        pcluster=pcluster_command(target),
    )


def pcluster_command(target: Target) -> list[str] | None:
    """ParallelCluster's command for this target, if installed (see ``find_pcluster``)."""
    from provisioner.drivers.pcluster import find_pcluster

    return find_pcluster(target.home)


def sandbox_validates_only(target: Target) -> bool:
    """In the sandbox a real ParallelCluster only validates (its create needs resources the
    emulator lacks); a stand-in named by FMCTL_PCLUSTER (tests) creates."""
    import os

    return target.sandbox and not os.environ.get("FMCTL_PCLUSTER")


#: Kinds ParallelCluster's validators need to exist before they can run: all free and quick.
CHECK_NEEDS = frozenset(
    {"vpc", "subnet", "sg", "bucket", "artifacts", "placement-group", "iam-policy"}
)


def infra_plan(spec: ClusterSpec, target: Target | None = None) -> Plan:
    """The plan of a resolved spec: the infrastructure, and for Slurm the ParallelCluster
    cluster on top of it when a `pcluster` is available for ``target``.

    ParallelCluster's validators run as soon as what they read exists, and the file
    system (the first resource that is slow and billed) waits for them.
    """
    import dataclasses

    from provisioner.catalog import load_catalog
    from provisioner.plan.graph import Node
    from provisioner.plan.infra import build_plan
    from provisioner.render.context import build_context

    context = build_context(spec, load_catalog())
    plan = build_plan(context)
    if spec.scheduler == "kubernetes":
        return _with_eks(spec, context, plan, target)
    if spec.scheduler != "slurm" or target is None or not pcluster_command(target):
        return plan
    folder = target.home / "clusters" / spec.metadata.name
    nodes = dict(plan.nodes)
    check = Node(
        "parallelcluster/check",
        "parallelcluster-check",
        tuple(sorted(n for n, node in nodes.items() if node.kind in CHECK_NEEDS)),
        {"context": context, "config_path": str(folder / "cluster-config.checked.yaml")},
    )
    for n, node in nodes.items():
        if node.kind == "fsx" and node.owned:
            nodes[n] = dataclasses.replace(node, deps=(*node.deps, check.id))
    cluster = Node(
        "parallelcluster",
        "parallelcluster",
        tuple(sorted([*nodes, check.id])),
        {
            "context": context,
            "config_path": str(folder / "cluster-config.yaml"),
            "validate_only": sandbox_validates_only(target),
        },
    )
    return Plan({**nodes, check.id: check, cluster.id: cluster})


def kubeconfig_path(target: Target | None, name: str) -> Path:
    """Where `up` writes the cluster's kubeconfig: merged into the user's (as `aws eks
    update-kubeconfig` does) against AWS; the cluster's own folder in the sandbox."""
    from provisioner.drivers.eks_auth import default_kubeconfig

    if target is None or target.sandbox:
        home = target.home if target else Path("~/.fmctl").expanduser()
        return home / "clusters" / name / "kubeconfig"
    return default_kubeconfig()


def _with_eks(spec: ClusterSpec, context: Any, plan: Plan, target: Target | None) -> Plan:
    from provisioner.plan.eks_plan import eks_nodes
    from provisioner.render.kubernetes import render_kubernetes

    files = render_kubernetes(context)
    kubeconfig = kubeconfig_path(target, spec.metadata.name)
    sandbox_home = target.home if target is not None and target.sandbox else None
    extra = eks_nodes(spec, context, files, plan.nodes, kubeconfig, sandbox_home)
    return Plan({**plan.nodes, **extra})


def expected_seconds(plan: Plan) -> dict[str, float]:
    """Documented creation time per node."""
    from provisioner.plan.registry import all_kinds

    kinds = all_kinds()
    return {n: kinds[node.kind].create_seconds for n, node in plan.nodes.items()}


@dataclass
class PlanView:
    """`fmctl plan`: the graph, what exists, waves, and the critical path."""

    plan: Plan
    exists: dict[str, bool] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def as_data(self) -> dict[str, Any]:
        """The plan as JSON-able data."""
        critical, chain = self.plan.critical_path(self.seconds)
        return {
            "resources": [
                {
                    "id": n.id,
                    "kind": n.kind,
                    "dependsOn": list(n.deps),
                    "owned": n.owned,
                    "exists": self.exists.get(n.id),
                    "expectedSeconds": self.seconds.get(n.id),
                }
                for n in self.plan.nodes.values()
            ],
            "waves": self.plan.levels(),
            "criticalPath": {"seconds": critical, "resources": chain},
            "serialSeconds": sum(self.seconds.values()),
        }


def plan_view(spec: ClusterSpec, target: Target | None) -> PlanView:
    """The plan, with what exists already when a target is given."""
    from provisioner.plan.registry import all_kinds

    plan = infra_plan(spec)
    view = PlanView(plan, seconds=expected_seconds(plan))
    if target is not None:
        engine = make_engine(target, spec.metadata.name, spec, lambda e: None)
        kinds = all_kinds()
        for wave in plan.levels():
            for n in wave:
                node = plan.nodes[n]
                found = (
                    kinds[node.kind].discover(engine, node)
                    if all(view.exists.get(d) for d in node.deps)
                    else None
                )
                view.exists[n] = found is not None
                if found is not None:
                    engine.outputs[n] = found
    return view


def up(
    spec: ClusterSpec, spec_text: str, target: Target, on_event: Callable[[Event], None]
) -> tuple[RunResult, Engine]:
    """Create what is missing of the cluster's infrastructure (the lock held throughout)."""
    from provisioner.plan.registry import all_kinds

    state = ClusterState(target.home, spec.metadata.name)
    lock = state.lock()
    try:
        state.save_spec(spec_text)

        def record(event: Event) -> None:
            state.log({"resource": event.resource, "state": event.state, "detail": event.detail})
            on_event(event)

        engine = make_engine(target, spec.metadata.name, spec, record)
        result = run_up(infra_plan(spec, target), engine, all_kinds())
        state.save_outputs(engine.outputs)
        return result, engine
    finally:
        lock.close()


def find_owned(engine: Engine) -> list[Found]:
    """Everything tagged as the cluster's, in every kind (tags only)."""
    from provisioner.plan.registry import all_kinds

    found: list[Found] = []
    for kind in all_kinds().values():
        found += kind.find_all(engine)
    return found


def down(
    name: str,
    target: Target,
    on_event: Callable[[Event], None],
    skip_kubernetes_cleanup: bool = False,
) -> tuple[RunResult, list[Found]]:
    """Delete everything tagged as the cluster's, dependents first (``skip_kubernetes_cleanup``:
    see ``Engine.skip_kubernetes_cleanup``)."""
    from provisioner.plan.registry import all_kinds

    state = ClusterState(target.home, name)
    lock = state.lock()
    try:

        def record(event: Event) -> None:
            state.log({"resource": event.resource, "state": event.state, "detail": event.detail})
            on_event(event)

        engine = make_engine(target, name, None, record)
        engine.skip_kubernetes_cleanup = skip_kubernetes_cleanup
        found = find_owned(engine)
        result = run_down(deletion_order(found, all_kinds()), engine, all_kinds())
        if result.ok:
            state.save_outputs({})
        return result, found
    finally:
        lock.close()
