"""Kubernetes output: what fmctl creates on AWS (aws/), the in-cluster manifests
(kubernetes/, one component per folder, each with a kustomization.yaml), GitOps entry points
(gitops/) and the values file for the training chart (charts/)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from provisioner.catalog.charts import DRA_DRIVER, KUEUE, Chart
from provisioner.catalog.eks_repair import VERIFY_NAMESPACE
from provisioner.render.context import ClusterContext
from provisioner.render.engine import render_template
from provisioner.render.monitoring import alert_rules, dashboards
from provisioner.render.pools import PoolContext
from provisioner.render.queueing import Placement, dra_values, dump_values, kueue_values
from provisioner.shipped import shipped_dir

#: The ProvisioningRequest API, served before Kueue starts when a pool is autoscaled.
PROVISIONING_CRD = "charts/provisioningrequest-crd.yaml"

#: Argo CD applies lower waves first: namespaces, then plugins and storage, then the rest.
SYNC_WAVES = {
    "namespaces": -2,
    "training": -1,
    "nvidia-device-plugin": 0,
    "efa-device-plugin": 0,
    "dcgm": 0,
    "fsx": 0,
    "node-exporter": 1,
    "dcgm-exporter": 1,
    "efa-exporter": 1,
    "kube-state-metrics": 1,
    "cluster-autoscaler": 1,
    "health-verify": 1,
    "prometheus": 2,
    "grafana": 3,
    "kueue": 4,
    "nccl-test": 5,
}


@dataclass(frozen=True)
class ChartInstall:
    """An upstream chart this cluster gets, with the values fmctl writes for it (in the
    deployment folder, for `up`, `helm` by hand, Argo CD and Flux alike)."""

    chart: Chart
    values: str
    #: The Pod Security level its namespace enforces (its pods' needs).
    pod_security: str
    #: Rendered files (CRDs) applied with the chart, before its controllers start: APIs they
    #: only use when served as they start.
    crds: tuple[str, ...] = ()

    @property
    def values_file(self) -> str:
        """Where the values are in the deployment folder."""
        return f"charts/{self.chart.name}-values.yaml"


def chart_installs(c: ClusterContext) -> tuple[ChartInstall, ...]:
    """Kueue (kubernetes.queueing: kueue) and NVIDIA's DRA driver (UltraServer pools), in
    install order."""
    out = []
    if c.queueing is not None:
        # Kueue's controller runs as non-root with every capability dropped.
        values = dump_values(kueue_values(c.queueing))
        crds = (PROVISIONING_CRD,) if c.queueing.provisioned_flavors else ()
        out.append(ChartInstall(KUEUE, values, "restricted", crds))
    if c.dra:
        # Its kubelet plugin is privileged: it manages the GPUs' IMEX channels.
        values = dump_values(dra_values(c.kubernetes_version, c.dra_pools))
        out.append(ChartInstall(DRA_DRIVER, values, "privileged"))
    return tuple(out)


@dataclass(frozen=True)
class NcclRun:
    """What the NCCL all-reduce job template makes: the committed job (suspended, on two
    nodes of the pool) or one `fmctl check` starts on the idle nodes it chose."""

    name: str = "nccl-allreduce"
    namespace: str = "training"
    count: int = 2
    nodes: tuple[str, ...] = ()
    suspend: bool = True
    service_account: str = "trainer"
    #: Kueue's placement of the job's pods (None: no queue, kube-scheduler places them).
    placement: Placement | None = None
    #: The job's ComputeDomain (NVLink across the UltraServer's nodes), on DRA pools.
    compute_domain: bool = False
    #: The verify gate's pair: it tolerates the startup taint of the node it verifies.
    verify: bool = False


def queued(c: ClusterContext, pool: PoolContext, run: NcclRun) -> NcclRun:
    """``run`` with this cluster's queue placement and, on a DRA pool, a ComputeDomain."""
    count = len(run.nodes) if run.nodes else run.count
    placement = (
        c.queueing.placement(pool.name, count, pool.itype.ultra_server) if c.queueing else None
    )
    return replace(run, placement=placement, compute_domain=pool.name in c.dra_pools)


def nccl_job(c: ClusterContext, pool: PoolContext, run: NcclRun) -> str:
    """The NCCL all-reduce job's manifests (ConfigMap, headless Service, Job) for ``pool``."""
    return render_template("kubernetes/nccl-test/job.yaml.j2", c=c, nccl_pool=pool, run=run)


@dataclass(frozen=True)
class Component:
    """One folder under kubernetes/: its files (template name -> output name)."""

    name: str
    files: tuple[tuple[str, str], ...]
    namespace: str | None = None


def components(c: ClusterContext) -> list[Component]:
    """The in-cluster components this cluster gets, in apply order."""
    out = [
        Component(
            "namespaces",
            (
                ("namespaces.yaml.j2", "namespaces.yaml"),
                ("network-policies.yaml.j2", "network-policies.yaml"),
            ),
        ),
        Component("training", (("rbac.yaml.j2", "rbac.yaml"),), "training"),
        Component(
            "nvidia-device-plugin", (("daemonset.yaml.j2", "daemonset.yaml"),), "fmctl-system"
        ),
    ]
    if c.efa_pools:
        out.append(
            Component(
                "efa-device-plugin", (("daemonset.yaml.j2", "daemonset.yaml"),), "fmctl-system"
            )
        )
    # The GPU nodes' one DCGM host engine, which the exporter, the health agent, the verify
    # gate and `fmctl check` all connect to (templates/kubernetes/dcgm).
    out.append(Component("dcgm", (("daemonset.yaml.j2", "daemonset.yaml"),), "fmctl-system"))
    if c.fsx:
        out.append(
            Component(
                "fsx",
                (("storageclass.yaml.j2", "storageclass.yaml"), ("volume.yaml.j2", "volume.yaml")),
            )
        )
    if c.prometheus:
        out.append(
            Component("node-exporter", (("daemonset.yaml.j2", "daemonset.yaml"),), "monitoring")
        )
        if c.gpu_metrics:
            out.append(
                Component("dcgm-exporter", (("daemonset.yaml.j2", "daemonset.yaml"),), "monitoring")
            )
        if c.efa_metrics and c.efa_pools:
            out.append(
                Component("efa-exporter", (("daemonset.yaml.j2", "daemonset.yaml"),), "monitoring")
            )
        out.append(
            Component(
                "kube-state-metrics",
                (("rbac.yaml.j2", "rbac.yaml"), ("deployment.yaml.j2", "deployment.yaml")),
                "monitoring",
            )
        )
        out.append(
            Component(
                "prometheus",
                (
                    ("rbac.yaml.j2", "rbac.yaml"),
                    ("config.yaml.j2", "config.yaml"),
                    ("deployment.yaml.j2", "deployment.yaml"),
                ),
                "monitoring",
            )
        )
        if c.grafana:
            out.append(
                Component(
                    "grafana",
                    (("config.yaml.j2", "config.yaml"), ("deployment.yaml.j2", "deployment.yaml")),
                    "monitoring",
                )
            )
    if c.autoscaled_pools:
        out.append(
            Component(
                "cluster-autoscaler",
                (("rbac.yaml.j2", "rbac.yaml"), ("deployment.yaml.j2", "deployment.yaml")),
            )
        )
    if c.health_controller:
        files = [("controller.yaml.j2", "controller.yaml")]
        if c.health_kubernetes_agent:
            files.append(("agent.yaml.j2", "agent.yaml"))
        out.append(Component("health-verify", tuple(files)))
    if c.queueing is not None:
        out.append(Component("kueue", (("queues.yaml.j2", "queues.yaml"),)))
    if c.efa_pools or c.pools:
        out.append(Component("nccl-test", (("job.yaml.j2", "job.yaml"),), "training"))
    return out


#: Components run on demand, left out of the stack's kustomization and so out of what Argo CD
#: and Flux sync: the NCCL test Job is started by patching `suspend`, which Argo's selfHeal
#: would undo mid-run (suspending a running Job deletes its pods), and Flux's `wait: true`
#: would wait on a Job that is not meant to run. `up` still applies it (suspended).
ON_DEMAND = ("nccl-test",)


#: What the verify gate's Job runs: verify-node.sh and what it sources (slurm/lib).
VERIFY_SCRIPTS = ("verify-node.sh", "nvlinks.sh", "row-remap.sh", "efa-devices.sh")
#: Where a pool's Job template says the Job's name and its node go: the controller's
#: stand-ins (templates/kubernetes/health-verify/verify_controller.py).
VERIFY_NAME, VERIFY_NODE = "fmctl-job-name-standin", "fmctl-node-name-standin"
#: The peer's stand-in in a pool's pair template.
VERIFY_PEER = "fmctl-peer-name-standin"
#: The controller's program and the module it calls AWS with.
VERIFY_CONTROLLER = ("verify_controller.py", "aws_call.py", "kube_call.py")
#: fmctl's node health agent on EKS (health.kubernetesAgent): its program, and the Slurm
#: agent's looks and fault table it runs (slurm/lib).
AGENT_PROGRAM = ("node_agent.py", "kube_call.py")
AGENT_SCRIPTS = (
    "health-detect.sh",
    "nvlinks.sh",
    "row-remap.sh",
    "faults.tsv",
    "dcgm-watch.sh",
)
#: Its settings' key in its ConfigMap (no pool's name: those are DNS labels).
SETTINGS_FILE = "_settings.json"


@dataclass(frozen=True)
class VerifyGate:
    """The EKS verify gate's parts (health.verify.kubernetesGate): the scripts its Jobs
    run, the controller's sources (file name -> text), each pool's Job as JSON with
    stand-in names, and the controller's settings (``SETTINGS_FILE``: the region, whether it
    replaces a node that failed, each pool's repair budget and pair floor)."""

    scripts: dict[str, str]
    controller: dict[str, str]
    jobs: dict[str, str]
    settings: str = ""
    #: Each pool's 2-node NCCL pair (ConfigMap, Service, Job) as JSON, with stand-ins for
    #: its name, the node and the peer (pools a pair runs on only).
    pairs: dict[str, str] = field(default_factory=dict)
    #: The node agent's files (health.kubernetesAgent): its program and scripts.
    agent: dict[str, str] = field(default_factory=dict)


def verify_gate(c: ClusterContext) -> VerifyGate:
    """The gate's parts for this cluster."""
    import json

    import yaml

    lib = shipped_dir("slurm") / "lib"
    jobs = {
        pool.name: json.dumps(
            yaml.safe_load(
                render_template(
                    "kubernetes/health-verify/job.yaml.j2",
                    c=c,
                    pool=pool,
                    job=VERIFY_NAME,
                    node=VERIFY_NODE,
                )
            ),
            sort_keys=True,
        )
        for pool in c.pools
        if c.health_verify_kubernetes_gate
    }
    source = shipped_dir("templates") / "kubernetes/health-verify"
    paired = [p for p in c.pools if c.health_verify_kubernetes_gate and pair_runs(c, p)]
    settings = {
        "region": c.region,
        "replace": c.gate_replaces,
        "agent": c.health_kubernetes_agent,
        "budgets": {pool.name: c.repair_budget(pool) for pool in c.pools},
        "pairs": {pool.name: _floor(pool) for pool in paired},
    }
    agent = {}
    if c.health_kubernetes_agent:
        agent = {name: (source / name).read_text() for name in AGENT_PROGRAM}
        agent |= {name: (lib / name).read_text() for name in AGENT_SCRIPTS}
    gated = c.health_verify_kubernetes_gate
    return VerifyGate(
        scripts={name: (lib / name).read_text() for name in VERIFY_SCRIPTS} if gated else {},
        controller={name: (source / name).read_text() for name in VERIFY_CONTROLLER},
        jobs=jobs,
        settings=json.dumps(settings, sort_keys=True),
        pairs={pool.name: _pair_template(c, pool) for pool in paired},
        agent=agent,
    )


def pair_runs(c: ClusterContext, pool: PoolContext) -> bool:
    """Does a new node of ``pool`` pass a 2-node NCCL pair too (health.verify.ncclPair), as
    on Slurm: two nodes or more, on EFA; not on a DRA pool, whose pair would need a
    ComputeDomain of its own (not yet)."""
    return (
        c.health_verify_nccl_pair and pool.efa and pool.count >= 2 and pool.name not in c.dra_pools
    )


def _floor(pool: PoolContext) -> dict[str, object]:
    """The pair's floor (catalog.nccl_baselines.pair_floor, as verify-pair.sh's)."""
    from provisioner.catalog.nccl_baselines import pair_floor

    floor = pair_floor(pool.instance_type, pool.itype.network.bandwidth_gbps)
    return {"gbps": floor.floor_gbs, "bytes": floor.size_bytes, "why": floor.source}


def _pair_template(c: ClusterContext, pool: PoolContext) -> str:
    """`fmctl check`'s NCCL all-reduce on two named nodes, as the verify controller makes
    it: in fmctl-system, tolerating the startup taint, labelled as the controller's (no
    fmctl.dev/cluster label: `up` would take it for its own and prune it)."""
    import json

    import yaml

    run = NcclRun(
        name=VERIFY_NAME,
        namespace=VERIFY_NAMESPACE,
        nodes=(VERIFY_NODE, VERIFY_PEER),
        suspend=False,
        service_account="default",
        verify=True,
    )
    docs = [d for d in yaml.safe_load_all(nccl_job(c, pool, run)) if d]
    for doc in docs:
        labels = doc["metadata"]["labels"]
        labels.pop("fmctl.dev/cluster", None)
        labels |= {
            "app.kubernetes.io/name": "fmctl-verify-pair",
            "app.kubernetes.io/managed-by": "fmctl-verify",
        }
        doc["metadata"]["annotations"] = {"fmctl.dev/node": VERIFY_NODE}
    return json.dumps(docs, sort_keys=True)


def _manifests(c: ClusterContext) -> dict[str, str]:
    files: dict[str, str] = {}
    comps = components(c)
    nccl_pool = (c.efa_pools or c.pools)[0]
    boards = dashboards("kubernetes")
    # The EFA counter script Slurm nodes run, shipped to Kubernetes nodes in a ConfigMap.
    efa_script = (shipped_dir("slurm") / "lib" / "efa-metrics.sh").read_text()
    dcgm_counters = (shipped_dir("slurm") / "lib" / "dcgm-counters.csv").read_text()
    rules = alert_rules(c.idle_after)
    charts = chart_installs(c)
    gate = verify_gate(c) if c.health_controller else VerifyGate({}, {}, {})
    for comp in comps:
        names = []
        for template, output in comp.files:
            files[f"kubernetes/{comp.name}/{output}"] = render_template(
                f"kubernetes/{comp.name}/{template}",
                c=c,
                nccl_pool=nccl_pool,
                run=queued(c, nccl_pool, NcclRun(count=min(nccl_pool.count, 2))),
                dashboards=boards,
                efa_script=efa_script,
                dcgm_counters=dcgm_counters,
                alert_rules=rules,
                charts=charts,
                verify_scripts=gate.scripts,
                verify_controller=gate.controller,
                verify_jobs=gate.jobs,
                verify_settings=gate.settings,
                verify_pairs=gate.pairs,
                agent_files=gate.agent,
                settings_file=SETTINGS_FILE,
            )
            names.append(output)
        files[f"kubernetes/{comp.name}/kustomization.yaml"] = render_template(
            "kubernetes/component-kustomization.yaml.j2",
            c=c,
            resources=names,
            wave=SYNC_WAVES[comp.name],
        )
    files["kubernetes/kustomization.yaml"] = render_template(
        "kubernetes/kustomization.yaml.j2",
        c=c,
        components=[comp.name for comp in comps if comp.name not in ON_DEMAND],
        on_demand=[comp.name for comp in comps if comp.name in ON_DEMAND],
    )
    return files


def _aws(c: ClusterContext) -> dict[str, str]:
    files = {
        "aws/eks-cluster.yaml": render_template("aws/eks-cluster.yaml.j2", c=c),
        "aws/eksctl-cluster.yaml": render_template("aws/eksctl-cluster.yaml.j2", c=c),
        "aws/nodegroups/system.yaml": render_template("aws/nodegroup-system.yaml.j2", c=c),
    }
    for pool in c.pools:
        files[f"aws/nodegroups/{pool.name}.yaml"] = render_template(
            "aws/nodegroup.yaml.j2", c=c, p=pool
        )
        files[f"aws/launch-templates/{pool.name}.yaml"] = render_template(
            "aws/launch-template.yaml.j2", c=c, p=pool
        )
        if pool.autoscaled or c.verify_replaces:
            files[f"aws/autoscaling/{pool.name}.yaml"] = render_template(
                "aws/autoscaling.yaml.j2", c=c, p=pool
            )
    return files


def render_kubernetes(c: ClusterContext) -> dict[str, str]:
    """Files of a Kubernetes (EKS) deployment folder."""
    files = {**_aws(c), **_manifests(c)}
    charts = chart_installs(c)
    for install in charts:
        files[install.values_file] = render_template(
            "charts/upstream-values.yaml.j2", c=c, install=install
        )
        for crd in install.crds:
            files[crd] = render_template(f"{crd}.j2", c=c)
            # Flux applies a Kustomization's CRDs before its other objects (the HelmRelease):
            # a copy inside its folder, which kustomize reads only below its root.
            files[f"gitops/flux/{crd.rsplit('/', 1)[1]}"] = files[crd]
    files["gitops/argocd-application.yaml"] = render_template(
        "gitops/argocd-application.yaml.j2", c=c, charts=charts
    )
    files["gitops/flux-kustomization.yaml"] = render_template(
        "gitops/flux-kustomization.yaml.j2", c=c, charts=charts
    )
    if charts:
        for install in charts:
            files[f"gitops/flux/{install.chart.name}.yaml"] = render_template(
                "gitops/flux-helmrelease.yaml.j2", c=c, install=install
            )
        files["gitops/flux/kustomization.yaml"] = render_template(
            "gitops/flux-charts-kustomization.yaml.j2", c=c, charts=charts
        )
    files[f"charts/values-{c.name}.yaml"] = render_template(
        "charts/values.yaml.j2", c=c, p=(c.efa_pools or c.pools)[0]
    )
    return files
