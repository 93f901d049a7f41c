"""`fmctl check NAME` on an EKS cluster: gather what ``check_folder`` judges.

1. Choose the nodes: each GPU pool's Ready, schedulable nodes where no pod but a DaemonSet's
   holds a GPU or an EFA device (``select``). A busy node is left out, and said so, unless
   the user asks for it; even then the check's pod waits for the node to be free, since it
   asks for all of the node's devices.
2. In a namespace of its own (``fmctl-check-RUN``), a Job per chosen node runs
   slurm/lib/node-check.sh, pinned to its node and holding every GPU and EFA device there:
   the GPU part in DCGM's image, the EFA part in a container whose image has the EFA user
   space (the Deep Learning Container). Both containers' logs go into the results folder.
3. Per pool with two or more nodes that passed their own checks, the rendered NCCL
   all-reduce job across exactly those nodes (a broken node would only drag the pool's
   figure down); rank 0's log goes into the folder.
4. Delete the namespace (its Jobs and pods go with it), whatever happened. Each step waits
   up to the timeout.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from provisioner.catalog.eks_repair import UNHEALTHY_TAINT, UNVERIFIED_TAINT
from provisioner.check.health_gather import VERDICT_ANNOTATION
from provisioner.check.results import passed_nodes, split_stream
from provisioner.drivers import yamlio
from provisioner.drivers.kube import KubeApi
from provisioner.graph.pacing import poll_schedule
from provisioner.render.context import ClusterContext
from provisioner.render.engine import render_template
from provisioner.render.kubernetes import NcclRun, nccl_job, queued
from provisioner.render.pools import POOL_LABEL
from provisioner.render.queueing import Placement, tightest_level
from provisioner.resources.kube_health import EFA, GPU
from provisioner.shipped import shipped_dir

#: The check's namespaces: a prefix and the run's id (so a crashed run never blocks the next).
NAMESPACE_PREFIX = "fmctl-check-"
#: How long a node's check takes (DCGM's level-2 diagnostic is most of it): when to look.
EXPECTED_SECONDS = 240.0
#: API calls in flight at once for per-node work (each node's Job, its results).
READERS = 32
#: The label every object of a check carries (its namespace is found and deleted by it).
APP_SELECTOR = "app.kubernetes.io/name=fmctl-check"


@dataclass(frozen=True)
class NodeState:
    """What a check needs to know of one node."""

    name: str
    pool: str
    ready: bool
    cordoned: bool
    gpus: int
    efa: int
    #: Pods (namespace/name), not a DaemonSet's, that hold its GPUs or EFA devices.
    busy_with: tuple[str, ...] = ()
    #: Why the verify gate holds it out of service ("" when it does not): it carries the
    #: gate's startup taint, with the verify controller's verdict if there is one.
    unverified: str = ""


@dataclass
class Selection:
    """The nodes to check per pool, and those left out with the reason."""

    chosen: dict[str, list[NodeState]] = field(default_factory=dict)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)


def _holds_devices(pod: dict[str, Any]) -> bool:
    for container in pod.get("spec", {}).get("containers", []):
        resources = container.get("resources") or {}
        for part in ("requests", "limits"):
            asked = resources.get(part) or {}
            if any(str(asked.get(r, "0")) not in ("0", "") for r in (GPU, EFA)):
                return True
    return False


def node_states(nodes: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]]) -> list[NodeState]:
    """Nodes with their pool, readiness, allocatable devices and who holds them."""
    holders: dict[str, list[str]] = {}
    for pod in pods:
        node = pod.get("spec", {}).get("nodeName")
        phase = pod.get("status", {}).get("phase", "Pending")
        owners = pod["metadata"].get("ownerReferences") or []
        if not node or phase in ("Succeeded", "Failed"):
            continue
        if any(o.get("kind") == "DaemonSet" for o in owners) or not _holds_devices(pod):
            continue  # device plugins and exporters run everywhere and hold no devices
        meta = pod["metadata"]
        holders.setdefault(node, []).append(f"{meta.get('namespace', '')}/{meta['name']}")
    states = []
    for node in nodes:
        meta, status = node["metadata"], node.get("status", {})
        labels = meta.get("labels", {})
        allocatable = status.get("allocatable", {})
        states.append(
            NodeState(
                name=meta["name"],
                pool=labels.get(POOL_LABEL, ""),
                ready=any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in status.get("conditions", [])
                ),
                cordoned=bool(node.get("spec", {}).get("unschedulable")),
                gpus=int(allocatable.get(GPU, 0)),
                efa=int(allocatable.get(EFA, 0)),
                busy_with=tuple(sorted(holders.get(meta["name"], []))),
                unverified=_unverified(node),
            )
        )
    return states


def _unverified(node: dict[str, Any]) -> str:
    """Why the verify gate keeps the node out of service, or "" (health.verify.kubernetesGate:
    the check's pods do not tolerate the gate's taint, so they would never land there)."""
    taints = {t.get("key") for t in node.get("spec", {}).get("taints") or []}
    if UNHEALTHY_TAINT in taints:
        # fmctl's node agent found a fault (health.kubernetesAgent): out for its repair.
        return "taken out of service for a fault fmctl's node agent found (being repaired)"
    if UNVERIFIED_TAINT not in taints:
        return ""
    verdict = str((node["metadata"].get("annotations") or {}).get(VERDICT_ANNOTATION, ""))
    if verdict.startswith("failed"):
        return f"failed its verify gate ({verdict.split(': ', 1)[-1]})"
    return "not verified yet (the verify gate runs on it)"


def select(states: Iterable[NodeState], pools: Iterable[str], include_busy: bool) -> Selection:
    """Which nodes of ``pools`` a check may run on now."""
    wanted = set(pools)
    selection = Selection({p: [] for p in sorted(wanted)})
    for node in sorted(states, key=lambda n: n.name):
        if node.pool not in wanted:
            continue
        why = ""
        if not node.ready:
            why = "not Ready"
        elif node.cordoned:
            why = "cordoned"
        elif node.unverified:
            why = node.unverified
        elif node.gpus == 0:
            why = "advertises no GPUs (is the NVIDIA device plugin running there?)"
        elif node.busy_with and not include_busy:
            why = f"busy: {', '.join(node.busy_with)} holds its GPUs (--include-busy waits for it)"
        if why:
            selection.skipped.append((node.name, node.pool, why))
        else:
            selection.chosen[node.pool].append(node)
    return selection


@dataclass(frozen=True)
class NodeJob:
    """One node's check Job."""

    name: str
    node: str
    pool: str
    gpus: int
    efa: int


def node_manifests(
    context: ClusterContext, selection: Selection, namespace: str, deadline: int
) -> tuple[list[dict[str, Any]], dict[str, NodeJob]]:
    """The first step's objects (namespace, script, a Job per chosen node) and the Jobs."""
    jobs = [
        NodeJob(f"node-{i}", n.name, pool, n.gpus, n.efa)
        for i, (pool, n) in enumerate(
            (pool, n) for pool, nodes in sorted(selection.chosen.items()) for n in nodes
        )
    ]
    lib = shipped_dir("slurm") / "lib"
    # node-check.sh sources efa-devices.sh from beside it: the ConfigMap holds both.
    scripts = {name: (lib / name).read_text() for name in ("node-check.sh", "efa-devices.sh")}
    # The template is rendered and parsed once per shape of Job (pool, GPUs, EFA devices)
    # with stand-in name and node; each node's Job is a copy with its own. A 1,024-node check
    # would otherwise parse a thousand YAML documents (seconds, on the critical path).
    shapes = sorted({NodeJob(_NAME, _NODE, j.pool, j.gpus, j.efa) for j in jobs}, key=str)
    text = render_template(
        "kubernetes/check/node-check.yaml.j2",
        c=context,
        namespace=namespace,
        jobs=shapes,
        scripts=scripts,
        deadline=deadline,
    )
    docs = [d for d in yamlio.load_all(text) if d]
    templates = iter(d for d in docs if d["kind"] == "Job")
    by_shape = {(s.pool, s.gpus, s.efa): next(templates) for s in shapes}
    objects = [d for d in docs if d["kind"] != "Job"]
    for job in jobs:
        shape = by_shape[(job.pool, job.gpus, job.efa)]
        objects.append(_fill(shape, {_NAME: job.name, _NODE: job.node}))
    return objects, {j.name: j for j in jobs}


#: Stand-ins for a node Job's name and node in the rendered shape (no Job or node is named
#: so: node Jobs are node-N, nodes are EC2 host names).
_NAME, _NODE = "fmctl-job-name-standin", "fmctl-node-name-standin"


def _fill(value: Any, names: dict[str, str]) -> Any:
    """A copy of ``value`` with every stand-in in its strings replaced (dicts and lists are
    new; the shape itself is left as it is for the next node)."""
    if isinstance(value, str):
        for standin, real in names.items():
            value = value.replace(standin, real)
        return value
    if isinstance(value, dict):
        return {_fill(k, names): _fill(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, names) for v in value]
    return value


def nccl_manifests(
    context: ClusterContext,
    nodes: dict[str, list[str]],
    namespace: str,
    labels: dict[str, dict[str, str]] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The second step's objects: per pool with two or more nodes, the rendered NCCL job
    across exactly those nodes; and the Job names by pool. With Kueue, each job goes
    through a LocalQueue of the check's namespace, required in the tightest network domain
    all its nodes share (``labels``: each node's labels), so that ranks follow Kueue's
    placement as they do on the committed job; on a DRA pool with its ComputeDomain."""
    pools = {p.name: p for p in context.pools}
    objects: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for pool, chosen in sorted(nodes.items()):
        if len(chosen) < 2:
            continue  # one node exercises NVLink only: node-check covers it
        name = f"nccl-{pool}"
        run = NcclRun(name, namespace, len(chosen), tuple(sorted(chosen)), False, "default")
        run = queued(context, pools[pool], run)
        if context.queueing is not None:
            levels = context.queueing.topology(pool).levels
            shared = tightest_level(levels, [(labels or {}).get(n, {}) for n in chosen])
            run = replace(
                run,
                placement=Placement("required", shared)
                if shared
                else Placement("preferred", levels[0]),
            )
        objects += [d for d in yamlio.load_all(nccl_job(context, pools[pool], run)) if d]
        names[pool] = name
    if names and context.queueing is not None:
        objects.insert(0, local_queue(context, namespace))
    return objects, names


def local_queue(context: ClusterContext, namespace: str) -> dict[str, Any]:
    """A LocalQueue of the check's namespace into the cluster's ClusterQueue (its
    namespaceSelector takes every namespace)."""
    assert context.queueing is not None
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {
            "name": context.queueing.local_queue,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "fmctl-check", "fmctl.dev/cluster": context.name},
        },
        "spec": {"clusterQueue": context.queueing.cluster_queue},
    }


def _domain(
    api: KubeApi, namespace: str, name: str, nodes: list[str], folder: Path, pool: str
) -> None:
    """The NCCL job's ComputeDomain status, with the nodes the job ran on, for the judge."""
    domain = api.get("resource.nvidia.com/v1beta1", "ComputeDomain", name, namespace) or {}
    said = {"status": domain.get("status") or {}, "nodes": sorted(nodes)}
    (folder / "nccl").mkdir(parents=True, exist_ok=True)
    (folder / "nccl" / f"{pool}.domain.json").write_text(json.dumps(said, indent=1) + "\n")


@dataclass
class Gathered:
    """What a run left in the results folder, and the nodes it could not check."""

    skipped: list[tuple[str, str, str]]
    run: str


def _job_done(job: dict[str, Any] | None) -> bool:
    conditions = (job or {}).get("status", {}).get("conditions") or []
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions
    )


def _pod_of(api: KubeApi, namespace: str, job: str, index: str | None = None) -> str | None:
    selector = f"batch.kubernetes.io/job-name={job}"
    if index is not None:
        selector += f",batch.kubernetes.io/job-completion-index={index}"
    pods = api.list("v1", "Pod", namespace, selector)
    ran = [p for p in pods if p.get("status", {}).get("phase") in ("Succeeded", "Failed")]
    return ran[0]["metadata"]["name"] if ran else None


def _wait(
    api: KubeApi,
    namespace: str,
    names: set[str],
    timeout: float,
    scale: float,
    sleep: Callable[[float], None],
    on_progress: Callable[[str], None],
) -> None:
    """Until every Job in ``names`` finished, or ``timeout`` seconds. One list of the check's
    namespace per look, whatever the number of nodes (a GET per Job would be a thousand
    round trips per look on a 1,024-node pool)."""
    waiting = set(names)
    started = time.monotonic()
    for offset in poll_schedule(EXPECTED_SECONDS, scale):
        if not waiting or time.monotonic() - started > timeout:
            return
        sleep(max(0.0, started + offset - time.monotonic()))
        jobs = {j["metadata"]["name"]: j for j in api.list("batch/v1", "Job", namespace)}
        done = {name for name in waiting if _job_done(jobs.get(name))}
        if done:
            waiting -= done
            finished = len(names) - len(waiting)
            on_progress(f"{finished} of {len(names)} jobs finished")


def _finished_pods(api: KubeApi, namespace: str) -> dict[str, str]:
    """Job name -> the name of its pod that ran to the end, from one list of the namespace."""
    found: dict[str, str] = {}
    for pod in api.list("v1", "Pod", namespace):
        job = (pod["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name")
        if job and pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            found.setdefault(job, pod["metadata"]["name"])
    return found


def _read_node(
    api: KubeApi, namespace: str, pod: str | None, job: NodeJob, folder: Path, timeout: float
) -> list[tuple[str, str, str]]:
    """A node Job's pod's logs into ``folder``; the node as skipped (with why) when the pod
    did not run to the end."""
    if pod is None:
        why = (
            f"its check did not finish within {timeout:.0f}s (its GPUs were taken since, its "
            "image could not be pulled, or the diagnostic hung)"
        )
        return [(job.node, job.pool, why)]
    containers = ("gpu", "efa") if job.efa else ("gpu",)
    log = "".join(api.logs(namespace, pod, container) for container in containers)
    skipped = split_stream(log, folder)
    if not (folder / "nodes" / job.node).is_dir():
        last = (log.strip().splitlines() or ["no output"])[-1]
        skipped.append((job.node, job.pool, f"its check printed no results: {last}"))
    return skipped


def clean_stale(api: KubeApi, cluster: str) -> list[str]:
    """Delete namespaces an interrupted check left behind (their pods may hold GPUs)."""
    stale = api.list("v1", "Namespace", selector=f"{APP_SELECTOR},fmctl.dev/cluster={cluster}")
    names = [n["metadata"]["name"] for n in stale]
    for name in names:
        api.delete("v1", "Namespace", name)
    return names


def gather(
    api: KubeApi,
    context: ClusterContext,
    folder: Path,
    include_busy: bool = False,
    timeout: float = 1800.0,
    nccl: bool = True,
    scale: float = 1.0,
    on_progress: Callable[[str], None] = lambda line: None,
    sleep: Callable[[float], None] = time.sleep,
) -> Gathered:
    """Run the check on the cluster behind ``api`` and fill ``folder``."""
    clean_stale(api, context.name)
    pods = api.list("v1", "Pod")
    all_nodes = api.list("v1", "Node")
    states = node_states(all_nodes, pods)
    labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in all_nodes}
    selection = select(states, [p.name for p in context.pools], include_busy)
    run = uuid.uuid4().hex[:8]
    namespace = NAMESPACE_PREFIX + run
    skipped = list(selection.skipped)
    chosen = sum(len(v) for v in selection.chosen.values())
    on_progress(f"checking {chosen} nodes ({len(skipped)} left out) in namespace {namespace}")
    if not chosen:
        return Gathered(skipped, run)
    objects, node_jobs = node_manifests(context, selection, namespace, int(timeout))
    wait = functools.partial(
        _wait, api, namespace, timeout=timeout, scale=scale, sleep=sleep, on_progress=on_progress
    )
    try:
        # The namespace and the script first; then the Jobs, side by side (a thousand of
        # them one after another would be a thousand round trips before the first starts).
        first = [o for o in objects if o["kind"] != "Job"]
        for obj in first:
            api.apply(obj)
        with ThreadPoolExecutor(max_workers=READERS) as workers:
            list(workers.map(api.apply, [o for o in objects if o["kind"] == "Job"]))
        wait(set(node_jobs))
        # Each node's results are a log or two: fetched side by side.
        ran = _finished_pods(api, namespace)
        with ThreadPoolExecutor(max_workers=READERS) as workers:
            reads = workers.map(
                lambda item: _read_node(api, namespace, ran.get(item[0]), item[1], folder, timeout),
                sorted(node_jobs.items()),
            )
            for found in reads:
                skipped += found
        passed = passed_nodes(context, folder) if nccl else {}
        objects, nccl_jobs = nccl_manifests(context, passed, namespace, labels)
        for obj in objects:
            api.apply(obj)
        if nccl_jobs:
            on_progress(
                f"NCCL across {', '.join(f'{len(passed[p])} nodes of {p}' for p in nccl_jobs)}"
            )
        wait(set(nccl_jobs.values()))
        for pool, name in sorted(nccl_jobs.items()):
            pod = _pod_of(api, namespace, name, "0")
            # A run that never ended is the pool's failure to report, as on Slurm.
            log = (
                api.logs(namespace, pod)
                if pod is not None
                else f"error: the NCCL job did not finish within {timeout:.0f}s\n"
            )
            (folder / "nccl").mkdir(parents=True, exist_ok=True)
            (folder / "nccl" / f"{pool}.txt").write_text(log)
            if pool in context.dra_pools:
                _domain(api, namespace, name, passed[pool], folder, pool)
    finally:
        api.delete("v1", "Namespace", namespace)
    return Gathered(skipped, run)
