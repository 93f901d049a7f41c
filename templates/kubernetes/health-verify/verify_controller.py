"""fmctl's verify controller (issue 33): a new GPU node of an EKS cluster takes work only
after it has passed the verify gate.

The GPU node groups register their nodes with the taint ``fmctl.dev/unverified:NoSchedule``
(health.verify.kubernetesGate), so no work lands on them. Every pass, this controller:

- starts, for each tainted GPU node that has no verdict yet, a Job pinned to it from its
  pool's template (``jobs/POOL.json`` in its ConfigMap, rendered by fmctl): the Job asks for
  every GPU and EFA device of the node and runs the same verify-node.sh a Slurm node runs
  before slurmd (GPUs, ECC, NVLinks, row remapping, EFA devices and loopback, DCGM's
  diagnostic), its exit status the verdict;
- on the Job's success, lifts the taint and records ``fmctl.dev/verify: passed TIME`` on the
  node, in one merge patch conditioned on the node's resourceVersion (a node changed since it
  was read is looked at again next pass, not overwritten), then deletes the Job;
- where its pool has a pair floor (health.verify.ncclPair: two nodes or more, on EFA), first
  runs a 2-node NCCL all-reduce of the node with an idle verified peer of its pool
  (``jobs/POOL.pair.json``, `fmctl check`'s all-reduce), as a Slurm node's verify-pair.sh
  does: the node is ``pairing`` meanwhile; at or above the floor it passes; below it, it
  pairs once more with a second peer (to tell a bad node from a bad peer) and fails when
  that is below too; with no idle verified peer (the first nodes of a new pool) the pair is
  skipped and said so; after one slow pair, it waits for a second idle peer. A pair that
  did not run (its pods never started, or its peer went while it ran) counts for nothing:
  another peer, or, with none, skipped. Each pair's
  figure is kept in ``fmctl.dev/verify-pair`` (``PEER=GBPS ...``);
- on its failure, records ``fmctl.dev/verify: failed TIME: WHAT`` (the FAIL lines of the
  Job's logs), deletes the Job and leaves the taint: the node takes no work, and is not tried
  again until a person removes the annotation (or the node is replaced: a new node has none);
- replaces a node that failed (health.repair: replace): terminates its instance in its
  managed node group's Auto Scaling group, which launches another (``aws_call``), and says
  so in ``fmctl.dev/verify-repair: replacing TIME: ...``. It holds the node instead, saying
  why in the same annotation (``held TIME: WHY``), while the pool's repair budget
  (health.maxInRepair) is in use by replacements not yet verified; while no node of the pool
  has passed the gate (the image, the gate or the pool is then the likelier fault, and
  replacing would only pay for new nodes that fail the same way); after
  ``REPLACEMENTS_IN_A_ROW`` replacements of the pool failed in a row; and while its Capacity
  Block is ending (``fmctl.dev/capacity-block-ending``: a replacement could not launch);
- deletes its Jobs whose node is gone or no longer tainted;
- acts on a node-level fault fmctl's node agent reports (health.kubernetesAgent: the node
  condition ``FmctlHealthy`` False, node_agent.py): within the pool's budget (replacements
  under way and its nodes taken out and not yet replaced), taints the node
  ``fmctl.dev/unhealthy:NoSchedule`` and says ``draining TIME: FAULT`` in
  ``fmctl.dev/verify-repair``; evicts its GPU pods at once where the fault table says the
  fault has lost their work (``jobs: requeue``), else lets them finish; then, with no GPU
  pod left on it, replaces it as above. Every such fault is a replacement (EKS gives the
  controller no reboot a verification follows). Beyond the budget, in a Capacity Block's
  last hour or without AWS access, the node is held (``held TIME: FAULT (held: WHY)``) and
  keeps working. Without the gate, a replacement frees its place in the budget once a node
  of the pool created after it is Ready.

A Job is named after the node's uid, not its name: EC2 reuses private IP addresses, so a
replacement can carry a gone node's name and must be verified anew.

Python's standard library only, in-cluster credentials (the pod's service account token,
re-read for every request: the kubelet rotates it). ``--once`` makes one pass.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aws_call import AutoScaling, AwsError
from kube_call import ACCOUNT, Api, ApiError, run_passes, server_url

TAINT = "fmctl.dev/unverified"
POOL_LABEL = "fmctl.dev/pool"
VERDICT = "fmctl.dev/verify"
REPAIR = "fmctl.dev/verify-repair"
PAIR = "fmctl.dev/verify-pair"
PEER_STANDIN = "fmctl-peer-name-standin"
#: A pair whose pods have not finished in this long is given up (a peer kept busy), and
#: another peer is tried.
PAIR_TIMEOUT_S = 1800.0
#: A pair's figure when it did not run at all (its pods never started): not held against
#: the node (``x`` in the annotation).
NOT_RUN = -1.0
#: What fmctl's all-reduce prints per message size (templates/kubernetes/nccl-test).
BUSBW = re.compile(r"size=(\d+) time_us=[0-9.]+ busbw_GBps=([0-9.]+)")
#: The taint fmctl puts on a Capacity Block's nodes in its last hour (block_ends).
BLOCK_ENDING = "fmctl.dev/capacity-block-ending"
#: Replacements of a pool that may fail the gate in a row before the rest are held.
REPLACEMENTS_IN_A_ROW = 3
#: A replacement not seen verified in this long no longer counts in the budget (a node
#: joins in minutes).
REPLACEMENT_S = 3600.0
#: How many nodes that freed a place are remembered (``Repairs.counted``): more than a
#: pool's replacements in REPLACEMENT_S at any budget fmctl renders, so none still pending
#: can be freed twice.
COUNTED_KEPT = 256
#: What TerminateInstanceInAutoScalingGroup says of an instance no longer in a group (ended
#: already: EKS node auto repair, the group's own health check or a person got there
#: first), as recorded in yaybu/touchdown#51 and keikoproj/upgrade-manager#25:
#: "ValidationError: Instance Id not found - No managed instance found for instance ID i-…".
INSTANCE_GONE = "No managed instance found"
#: The ConfigMap (in its namespace) the controller keeps its repair counts in.
REPAIRS_MAP = "fmctl-verify-repairs"
APP = "fmctl-verify"
#: What fmctl's rendered Job template says where the Job's name and node go.
NAME_STANDIN, NODE_STANDIN = "fmctl-job-name-standin", "fmctl-node-name-standin"
#: The node condition fmctl's node health agent keeps (node_agent.py), and the taint the
#: controller takes a node out of service with when it says False.
AGENT_CONDITION = "FmctlHealthy"
UNHEALTHY = "fmctl.dev/unhealthy"


def now() -> str:
    """The time, as the API writes times."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def job_name(node: dict[str, Any]) -> str:
    """The Job that verifies this node (by its uid: names come back with reused IPs)."""
    uid = str(node["metadata"].get("uid") or node["metadata"]["name"])
    return f"{APP}-{hashlib.sha256(uid.encode()).hexdigest()[:12]}"


def tainted(node: dict[str, Any]) -> bool:
    """Does the node carry the startup taint?"""
    return any(t.get("key") == TAINT for t in node.get("spec", {}).get("taints") or [])


def fill(value: Any, names: dict[str, str]) -> Any:
    """A copy of the template with the stand-ins replaced."""
    if isinstance(value, str):
        for standin, real in names.items():
            value = value.replace(standin, real)
        return value
    if isinstance(value, dict):
        return {fill(k, names): fill(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, names) for v in value]
    return value


def finished(job: dict[str, Any]) -> str | None:
    """``Complete`` or ``Failed`` once the Job controller says so, else None."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed"):
            return str(condition["type"])
    return None


def instance_of(node: dict[str, Any]) -> str:
    """The EC2 instance behind a node (its providerID, ``aws:///ZONE/i-...``), or ""."""
    found = str(node.get("spec", {}).get("providerID", "")).rsplit("/", 1)[-1]
    return found if found.startswith("i-") else ""


def unhealthy(node: dict[str, Any]) -> bool:
    """Has the controller taken the node out of service for an agent's fault?"""
    return any(t.get("key") == UNHEALTHY for t in node.get("spec", {}).get("taints") or [])


def agent_fault(node: dict[str, Any]) -> str:
    """The node-level fault fmctl's agent reports on the node ("" when none)."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == AGENT_CONDITION and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason") or "a fault")
    return ""


def passed(node: dict[str, Any]) -> bool:
    """Has the node passed the gate (taint lifted, or a passed verdict)?"""
    verdict = (node["metadata"].get("annotations") or {}).get(VERDICT, "")
    return verdict.startswith("passed") or not tainted(node)


class Repairs:
    """Replacing the nodes that failed the gate, within each pool's budget.

    ``replace``: health.repair is replace (else a failed node is only held); ``budgets``:
    nodes of each pool that may be in repair at once (health.maxInRepair, as fmctl computed
    it for the pool's size). A replacement counts in its pool's budget from the termination
    until a node of the pool created after it gets its verdict (or for an hour at most: a
    node joins in minutes). What it counts is kept in the ConfigMap ``REPAIRS_MAP``
    (``state``, ``load``), so a controller started again (a new pod, a system node drained)
    does not forget replacements under way and exceed the budget.
    """

    def __init__(
        self,
        aws: AutoScaling | None,
        replace: bool,
        budgets: dict[str, int],
        configured: bool = True,
    ) -> None:
        #: False when fmctl rendered no repair settings: failed nodes are left as they are.
        self.configured = configured
        self.aws = aws
        self.replace = replace
        self.budgets = budgets
        #: Pool -> when its replacements were asked for (epoch seconds), oldest first.
        self.pending: dict[str, list[float]] = {}
        #: Pool -> its replacements that failed the gate in a row.
        self.failed_in_a_row: dict[str, int] = {}
        #: The instances this controller has had terminated.
        self.terminated: set[str] = set()
        #: The nodes (uids) whose verdict freed a place, newest last: kept with the counts,
        #: so that a controller started again does not free a place twice for one node (it
        #: sees every Ready node of a pool without the gate as joining).
        self.counted: list[str] = []

    @property
    def replaces(self) -> bool:
        """Does it replace nodes (and so keep counts)?"""
        return self.configured and self.replace and self.aws is not None

    @property
    def keeps(self) -> bool:
        """Does it keep counts (it replaces nodes, for the gate or the agent)?"""
        return self.configured and self.aws is not None

    def state(self) -> str:
        """What must outlive the controller, as the ConfigMap's ``state`` holds it."""
        return json.dumps(
            {
                "pending": self.pending,
                "failedInARow": self.failed_in_a_row,
                "counted": self.counted,
            },
            sort_keys=True,
        )

    def load(self, text: str) -> None:
        """Take up what an earlier controller kept."""
        data = json.loads(text or "{}")
        self.pending = {k: [float(a) for a in v] for k, v in (data.get("pending") or {}).items()}
        self.failed_in_a_row = {k: int(v) for k, v in (data.get("failedInARow") or {}).items()}
        self.counted = [str(u) for u in data.get("counted") or []]

    def look(self, at: float) -> None:
        """Start a pass: replacements older than REPLACEMENT_S count no more."""
        for pool, asked in self.pending.items():
            self.pending[pool] = [a for a in asked if at - a < REPLACEMENT_S]

    def verdict(self, node: dict[str, Any], ok: bool) -> None:
        """A node got its verdict: one created after a replacement was asked for (that
        replacement, or one like it) frees its place in the budget."""
        pool = node["metadata"]["labels"][POOL_LABEL]
        asked = self.pending.get(pool)
        created = _epoch(str(node["metadata"].get("creationTimestamp") or ""))
        uid = str(node["metadata"].get("uid") or node["metadata"]["name"])
        if not asked or created is None or created < int(asked[0]) or uid in self.counted:
            return
        asked.pop(0)
        self.counted = [*self.counted, uid][-COUNTED_KEPT:]
        self.failed_in_a_row[pool] = 0 if ok else self.failed_in_a_row.get(pool, 0) + 1

    def hold(self, node: dict[str, Any], pool_nodes: list[dict[str, Any]]) -> str:
        """Why the failed node is not replaced now ("" when it may be)."""
        pool = node["metadata"]["labels"][POOL_LABEL]
        if not self.replace:
            return "health.repair is not replace: held for a person"
        if self.aws is None:
            return "no AWS access configured: held for a person"
        if any(t.get("key") == BLOCK_ENDING for t in node["spec"].get("taints") or []):
            return "its Capacity Block is ending: a replacement could not launch in it"
        if not any(passed(n) for n in pool_nodes if n is not node):
            return (
                f"no node of pool {pool} has passed the gate: the image, the gate or the "
                "pool is the likelier fault, not this node"
            )
        if self.failed_in_a_row.get(pool, 0) >= REPLACEMENTS_IN_A_ROW:
            return (
                f"the last {self.failed_in_a_row[pool]} replacements in pool {pool} failed "
                "the gate too"
            )
        budget = self.budgets.get(pool, 1)
        if len(self.pending.get(pool, [])) >= budget:
            return f"the repair budget of pool {pool} is in use ({budget}: health.maxInRepair)"
        if not instance_of(node):
            return "its node names no EC2 instance (spec.providerID)"
        return ""

    def hold_fault(self, node: dict[str, Any], pool_nodes: list[dict[str, Any]]) -> str:
        """Why a node the agent found faulty is not taken out of service now ("" when it
        may be): what is in repair in its pool (replacements under way, and its nodes
        taken out and not yet replaced) against the budget."""
        pool = node["metadata"]["labels"][POOL_LABEL]
        if self.aws is None:
            return "no AWS access configured: held for a person"
        if any(t.get("key") == BLOCK_ENDING for t in node["spec"].get("taints") or []):
            return "its Capacity Block is ending: a replacement could not launch in it"
        if not instance_of(node):
            return "its node names no EC2 instance (spec.providerID)"
        out = [
            n
            for n in pool_nodes
            if n is not node and unhealthy(n) and not _annotation(n, REPAIR).startswith("replacing")
        ]
        budget = self.budgets.get(pool, 1)
        in_repair = len(self.pending.get(pool, [])) + len(out)
        if in_repair >= budget:
            return (
                f"the repair budget of pool {pool} is in use ({in_repair} of {budget}: "
                "health.maxInRepair)"
            )
        return ""

    def replace_node(self, node: dict[str, Any]) -> bool:
        """Terminate the node's instance in its Auto Scaling group (``hold`` said it may),
        once: a node still listed after its termination (its note not yet read back, or
        the API slow to drop it) is not counted in the budget twice. False when the group
        no longer has the instance (another repair ended it first): nothing asked, nothing
        counted, and its node leaves with it."""
        assert self.aws is not None
        instance = instance_of(node)
        if instance in self.terminated:
            return True
        # Asked as of before the call: the group may launch the replacement (and its node
        # register) before the call returns, and a node created after the ask frees it.
        asked = time.time()
        try:
            self.aws.replace(instance)
        except AwsError as err:
            if err.code == "ValidationError" and INSTANCE_GONE in str(err):
                self.terminated.add(instance)
                return False
            raise
        self.terminated.add(instance)
        pool = node["metadata"]["labels"][POOL_LABEL]
        self.pending.setdefault(pool, []).append(asked)
        return True


def load_settings(path: Path | None) -> tuple[Repairs, dict[str, dict[str, Any]]]:
    """The settings fmctl rendered (``_settings.json``): how it repairs (region, replace,
    budgets) and each pool's pair floor (``{"gbps", "bytes", "why"}``)."""
    if path is None or not path.exists():
        return Repairs(None, False, {}, configured=False), {}
    data = json.loads(path.read_text())
    replace = bool(data.get("replace"))
    # The agent's faults are always repaired by replacement (EKS has no reboot the gate
    # would follow: a rebooted node would return unverified), so it needs AWS too.
    aws = AutoScaling(str(data["region"])) if replace or data.get("agent") else None
    budgets = {k: int(v) for k, v in (data.get("budgets") or {}).items()}
    return Repairs(aws, replace, budgets), dict(data.get("pairs") or {})


def parse_pairs(text: str) -> list[tuple[str, float | None]]:
    """``PEER=GBPS PEER=- PEER=x ...`` (``-``: the pair gave no figure; ``x``: it did not
    run)."""
    out: list[tuple[str, float | None]] = []
    for item in text.split():
        peer, _, figure = item.partition("=")
        try:
            out.append((peer, NOT_RUN if figure == "x" else float(figure)))
        except ValueError:
            out.append((peer, None))
    return out


def busbw_at(log: str, size: int) -> float | None:
    """The bus bandwidth the all-reduce printed at ``size`` bytes (the nearest size it ran,
    if not that one), GB/s; None when it printed none."""
    found = [(int(m.group(1)), float(m.group(2))) for m in BUSBW.finditer(log)]
    if not found:
        return None
    nearest = min(found, key=lambda f: abs(f[0] - size))[0]
    return min(b for s, b in found if s == nearest)


def gpu_busy(pods: list[dict[str, Any]]) -> set[str]:
    """The nodes on which a pod that has not ended asks for GPUs."""
    busy = set()
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for container in (pod.get("spec") or {}).get("containers") or []:
            asked = (container.get("resources") or {}).get("requests") or {}
            limits = (container.get("resources") or {}).get("limits") or {}
            if str(asked.get("nvidia.com/gpu") or limits.get("nvidia.com/gpu") or "0") != "0":
                busy.add(str(pod["spec"].get("nodeName") or ""))
    return busy


class Controller:
    """One cluster's gate: the API, the namespace its Jobs run in, the pools' templates,
    and how it repairs."""

    def __init__(
        self,
        api: Api,
        namespace: str,
        templates: dict[str, Any],
        repairs: Repairs | None = None,
        floors: dict[str, dict[str, Any]] | None = None,
        pairs: dict[str, Any] | None = None,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.templates = templates
        self.repairs = repairs or Repairs(None, False, {}, configured=False)
        #: Pool -> its pair floor, and its pair template (ConfigMap, Service, Job).
        self.floors = floors or {}
        self.pairs = pairs or {}
        #: The nodes whose GPUs are in use, read once per pass when a pair needs a peer.
        self.busy: set[str] | None = None
        #: The nodes that were pairing at the last pass (None: no pass yet).
        self.pairing: set[str] | None = None
        #: The repair counts as last kept in REPAIRS_MAP (None: not read yet).
        self.kept: str | None = None
        #: The GPU pods, read once per pass when a faulty node needs them.
        self.pods: list[dict[str, Any]] | None = None
        #: The nodes (uids) seen Ready in pools without the gate.
        self.joined_nodes: set[str] = set()

    def say(self, line: str) -> None:
        """A line of the controller's log."""
        # To the millisecond: what happened when, within a pass, is in the log only.
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        print(f"{stamp} {line}", flush=True)

    def run_pass(self) -> None:
        """Look at every GPU node once (see the module's docstring)."""
        jobs_path = f"/apis/batch/v1/namespaces/{self.namespace}/jobs"
        selector = urllib.parse.quote(f"app.kubernetes.io/name={APP}")
        jobs = {
            j["metadata"]["name"]: j
            for j in self.api.call("GET", f"{jobs_path}?labelSelector={selector}")["items"]
        }
        gpu_nodes = [
            n
            for n in self.api.call("GET", "/api/v1/nodes")["items"]
            if POOL_LABEL in (n["metadata"].get("labels") or {})
        ]
        if self.repairs.keeps and self.kept is None:
            self.repairs.load(self.read_repairs())
            self.kept = self.repairs.state()
        self.repairs.look(time.time())
        self.busy = None
        self.pods = None
        pools: dict[str, list[dict[str, Any]]] = {}
        for node in gpu_nodes:
            pools.setdefault(node["metadata"]["labels"][POOL_LABEL], []).append(node)
        wanted: set[str] = set()
        for node in (n for n in gpu_nodes if tainted(n)):
            name = job_name(node)
            wanted.add(name)
            pool = pools[node["metadata"]["labels"][POOL_LABEL]]
            try:
                self.step(node, name, jobs.get(name), jobs_path, pool)
            except ApiError as err:
                self.say(f"{node['metadata']['name']}: {err} (next pass tries again)")
        if self.repairs.aws is not None:
            # Replacements that joined free their places first, then the agent's faults.
            for node in gpu_nodes:
                if node["metadata"]["labels"][POOL_LABEL] not in self.templates:
                    self.joined(node)
        for node in gpu_nodes:
            fault = agent_fault(node)
            if not fault or tainted(node):
                # (A node in the gate has the gate's verdict to come: its checks see the
                # same fault.)
                continue
            try:
                self.take_out(node, fault, pools[node["metadata"]["labels"][POOL_LABEL]])
            except ApiError as err:
                self.say(f"{node['metadata']['name']}: {err} (next pass tries again)")
        if self.repairs.keeps and self.repairs.state() != self.kept:
            self.keep_repairs()
        pairing = {n["metadata"]["name"] for n in gpu_nodes if _verdict(n).startswith("pairing")}
        if pairing or self.pairing:
            # Pairs are left only by nodes that were pairing: none then, none to look for.
            self.tidy_pairs(pairing)
        self.pairing = pairing
        for name, job in jobs.items():
            if name not in wanted:
                node = (job["metadata"].get("annotations") or {}).get("fmctl.dev/node", "?")
                self.delete(jobs_path, name)
                self.say(f"{node}: its node is gone or no longer tainted, Job {name} deleted")

    def step(
        self,
        node: dict[str, Any],
        name: str,
        job: dict[str, Any] | None,
        jobs_path: str,
        pool_nodes: list[dict[str, Any]] | None = None,
    ) -> None:
        """Move one tainted node on: start its Job, act on the Job's verdict, or repair the
        node that failed."""
        meta = node["metadata"]
        verdict = (meta.get("annotations") or {}).get(VERDICT, "")
        if verdict.startswith("failed"):
            self.repair(node, pool_nodes or [node])
            return
        if verdict.startswith("pairing"):
            self.pair(node, pool_nodes or [node])
            return
        if job is None:
            pool = meta["labels"][POOL_LABEL]
            template = self.templates.get(pool)
            if template is None:
                self.say(f"{meta['name']}: no verify template for pool {pool}")
                return
            made = fill(template, {NAME_STANDIN: name, NODE_STANDIN: meta["name"]})
            self.api.call("POST", jobs_path, made)
            self.say(f"{meta['name']}: verifying (Job {name})")
            return
        outcome = finished(job)
        if outcome == "Complete" and meta["labels"][POOL_LABEL] in self.pairs:
            # Its own checks passed; a pair with a peer is the last.
            self.verdict(node, f"pairing {now()}: its own checks passed", lift=False)
            self.delete(jobs_path, name)
            self.say(f"{meta['name']}: its own checks passed; a 2-node NCCL pair next")
        elif outcome == "Complete":
            self.passed(node, f"passed {now()}")
            self.delete(jobs_path, name)
        elif outcome == "Failed":
            # The FAIL lines, else why the Job controller gave up (its condition's reason:
            # DeadlineExceeded when the pod never ran, BackoffLimitExceeded when it failed).
            why = next(
                (
                    c.get("reason") or c.get("message")
                    for c in (job.get("status") or {}).get("conditions") or []
                    if c.get("type") == "Failed" and c.get("status") == "True"
                ),
                None,
            )
            what = self.failures(name) or "its Job failed" + (f" ({why})" if why else "")
            self.failed(node, what)
            # What failed is on the node now; a person who clears the verdict gets a new run.
            self.delete(jobs_path, name)

    def passed(
        self, node: dict[str, Any], verdict: str, record: dict[str, Any] | None = None
    ) -> None:
        """The node passed the gate: lift the taint."""
        self.verdict(node, verdict, lift=True, record=record)
        self.repairs.verdict(node, ok=True)
        self.say(f"{node['metadata']['name']}: passed, {TAINT} lifted")

    def failed(self, node: dict[str, Any], what: str, record: dict[str, Any] | None = None) -> None:
        """The node failed the gate: keep it out of service (``repair`` acts next pass)."""
        self.verdict(node, f"failed {now()}: {what}", lift=False, record=record)
        self.repairs.verdict(node, ok=False)
        self.say(f"{node['metadata']['name']}: failed, kept out of service: {what}")

    def pair(self, node: dict[str, Any], pool_nodes: list[dict[str, Any]]) -> None:
        """Run the node's 2-node pair, or act on its outcome (see the module's docstring)."""
        meta = node["metadata"]
        pool = meta["labels"][POOL_LABEL]
        floor = self.floors.get(pool) or {"gbps": 0.0, "bytes": 1 << 30, "why": "no floor"}
        tried = parse_pairs((meta.get("annotations") or {}).get(PAIR, ""))
        name = f"{job_name(node)}-pair{len(tried)}"
        jobs_path = f"/apis/batch/v1/namespaces/{self.namespace}/jobs"
        try:
            job: dict[str, Any] | None = self.api.call("GET", f"{jobs_path}/{name}")
        except ApiError as err:
            if err.status != 404:
                raise
            job = None
        if job is None:
            self.start_pair(node, pool_nodes, name, tried)
            return
        peer = (job["metadata"].get("annotations") or {}).get("fmctl.dev/peer", "?")
        outcome = finished(job)
        if outcome is None:
            started = str(job["metadata"].get("creationTimestamp") or "")
            if started and _age(started) > PAIR_TIMEOUT_S:
                self.note(node, PAIR, " ".join(_said([*tried, (peer, NOT_RUN)])))
                self.delete_pair(name)
                self.say(f"{meta['name']}: the pair with {peer} did not run; another peer next")
            return
        figure = busbw_at(self.pair_logs(name), int(floor["bytes"]))
        if figure is None and peer not in {n["metadata"]["name"] for n in pool_nodes}:
            # The peer went while the pair ran (scaled in, replaced): no evidence against
            # either node, so not run, as a pair whose pods never started.
            self.note(node, PAIR, " ".join(_said([*tried, (peer, NOT_RUN)])))
            self.delete_pair(name)
            self.say(f"{meta['name']}: the pair with {peer} lost its peer; another peer next")
            return
        tried.append((peer, figure))
        # The figures go in the verdict's own patch (conditioned on the node as read): a
        # verdict refused leaves the pair's Job for the next pass to read again.
        record = {PAIR: " ".join(_said(tried))}
        limit = float(floor["gbps"])
        shown = "no figure" if figure is None else f"{figure:g} GB/s"
        slow = [(p, f) for p, f in tried if f != NOT_RUN and (f is None or f < limit)]
        if figure is not None and figure >= limit:
            verdict = f"passed {now()}: nccl-pair {shown} with {peer} (floor {limit:g})"
            self.passed(node, verdict, record)
        elif len(slow) >= 2:
            said = ", ".join(
                f"{'no figure' if f is None else f'{f:g} GB/s'} with {p}" for p, f in slow
            )
            self.failed(node, f"FAIL nccl-pair {said} < {limit:g} GB/s ({floor['why']})", record)
        else:
            self.note(node, PAIR, record[PAIR])
            self.say(
                f"{meta['name']}: nccl-pair {shown} with {peer} < {limit:g} GB/s; "
                "a second peer next"
            )
        self.delete_pair(name)

    def start_pair(
        self,
        node: dict[str, Any],
        pool_nodes: list[dict[str, Any]],
        name: str,
        tried: list[tuple[str, float | None]],
    ) -> None:
        """Start the node's pair with an idle verified peer it has not tried; none: skip."""
        meta = node["metadata"]
        pool = meta["labels"][POOL_LABEL]
        if self.busy is None:
            self.busy = gpu_busy(self.api.call("GET", "/api/v1/pods")["items"])
        been = {p for p, _ in tried}
        peers = sorted(
            n["metadata"]["name"]
            for n in pool_nodes
            if n is not node
            and not tainted(n)
            and not n.get("spec", {}).get("unschedulable")
            and n["metadata"]["name"] not in self.busy
            and n["metadata"]["name"] not in been
        )
        if not peers and all(figure == NOT_RUN for _, figure in tried):
            # As verify-pair.sh: a gate on the node, not on the pool's size or its load. A
            # pair that did not run (its peer kept busy, or gone) is no figure to wait on:
            # a node kept tainted for a peer that never comes is capacity the autoscaler
            # counts as coming and never scales in.
            self.passed(node, f"passed {now()}: no idle verified peer, nccl-pair skipped")
            return
        if not peers:
            return  # one slow pair: wait for a second idle peer to tell node from peer
        peer = peers[0]
        names = {NAME_STANDIN: name, NODE_STANDIN: meta["name"], PEER_STANDIN: peer}
        for doc in fill(self.pairs[pool], names):
            doc["metadata"].setdefault("annotations", {})["fmctl.dev/peer"] = peer
            plural = {"ConfigMap": "configmaps", "Service": "services", "Job": "jobs"}
            kind = str(doc["kind"])
            base = "/apis/batch/v1" if kind == "Job" else "/api/v1"
            path = f"{base}/namespaces/{self.namespace}/{plural[kind]}"
            try:
                self.api.call("POST", path, doc)
            except ApiError as err:
                if err.status != 409:  # made by a pass that stopped half-way
                    raise
        self.busy.add(peer)
        self.say(f"{meta['name']}: pairing with {peer} (Job {name})")

    def read_repairs(self) -> str:
        """The repair counts an earlier controller kept ("" when none)."""
        path = f"/api/v1/namespaces/{self.namespace}/configmaps/{REPAIRS_MAP}"
        try:
            found = self.api.call("GET", path)
        except ApiError as err:
            if err.status == 404:
                return ""
            raise
        return str((found.get("data") or {}).get("state", ""))

    def keep_repairs(self) -> None:
        """Keep the repair counts in REPAIRS_MAP (made on first use: the controller's own,
        not `up`'s, which would put back what it applied)."""
        state = self.repairs.state()
        path = f"/api/v1/namespaces/{self.namespace}/configmaps"
        body = {"data": {"state": state}}
        try:
            self.api.call("PATCH", f"{path}/{REPAIRS_MAP}", body, "application/merge-patch+json")
        except ApiError as err:
            if err.status != 404:
                raise
            made = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": REPAIRS_MAP,
                    "labels": {"app.kubernetes.io/managed-by": "fmctl-verify"},
                },
                **body,
            }
            self.api.call("POST", path, made)
        self.kept = state

    def tidy_pairs(self, pairing: set[str]) -> None:
        """Delete the pairs of nodes no longer pairing (gone, or told apart by a person)."""
        path = f"/apis/batch/v1/namespaces/{self.namespace}/jobs"
        selector = urllib.parse.quote("app.kubernetes.io/name=fmctl-verify-pair")
        for job in self.api.call("GET", f"{path}?labelSelector={selector}")["items"]:
            node = (job["metadata"].get("annotations") or {}).get("fmctl.dev/node", "")
            if node not in pairing:
                self.delete_pair(job["metadata"]["name"])
                self.say(f"{node}: no longer pairing, its pair {job['metadata']['name']} deleted")

    def pair_logs(self, name: str) -> str:
        """What the pair's pods printed (rank 0 prints the figures)."""
        pods_path = f"/api/v1/namespaces/{self.namespace}/pods"
        selector = urllib.parse.quote(f"batch.kubernetes.io/job-name={name}")
        out = []
        for pod in self.api.call("GET", f"{pods_path}?labelSelector={selector}")["items"]:
            try:
                out.append(str(self.api.call("GET", f"{pods_path}/{pod['metadata']['name']}/log")))
            except ApiError:
                continue
        return "\n".join(out)

    def delete_pair(self, name: str) -> None:
        """Delete a pair's Job (and pods), Service and ConfigMap."""
        self.delete(f"/apis/batch/v1/namespaces/{self.namespace}/jobs", name)
        for plural in ("services", "configmaps"):
            try:
                self.api.call("DELETE", f"/api/v1/namespaces/{self.namespace}/{plural}/{name}")
            except ApiError as err:
                if err.status != 404:
                    raise

    def take_out(self, node: dict[str, Any], fault: str, pool_nodes: list[dict[str, Any]]) -> None:
        """Act on a node-level fault fmctl's agent reports: within the pool's budget, taint
        the node out of service (``fmctl.dev/unhealthy:NoSchedule``), evict its GPU pods at
        once where the fault has lost their work already (the table's ``jobs: requeue``:
        their Jobs or Deployments start them elsewhere), and, once no pod holds its GPUs,
        replace it; beyond the budget, only say so (``held``)."""
        meta = node["metadata"]
        name = meta["name"]
        status = _annotation(node, REPAIR)
        if status.startswith("replacing"):
            return  # its instance is going; its node leaves with it
        if not unhealthy(node):
            why = self.repairs.hold_fault(node, pool_nodes)
            if why:
                if status.split(": ", 1)[-1] != f"{fault} (held: {why})":  # said once
                    self.note(node, REPAIR, f"held {now()}: {fault} (held: {why})")
                    self.say(f"{name}: {fault}: held: {why}")
                return
            taints = [*(node["spec"].get("taints") or [])]
            taints.append({"key": UNHEALTHY, "value": "agent", "effect": "NoSchedule"})
            patch = {
                "metadata": {
                    "resourceVersion": meta.get("resourceVersion"),
                    "annotations": {REPAIR: f"draining {now()}: {fault}"},
                },
                "spec": {"taints": taints},
            }
            self.api.call("PATCH", f"/api/v1/nodes/{name}", patch, "application/merge-patch+json")
            self.say(f"{name}: {fault}: out of service ({UNHEALTHY})")
        pods = [p for p in self.gpu_pods() if p["spec"].get("nodeName") == name]
        if pods and fault.endswith("jobs: requeue"):
            for pod in pods:
                self.evict(pod)
            return  # replaced once they are gone
        if pods:
            return  # its jobs finish first
        why = self.repairs.hold_fault(node, [n for n in pool_nodes if n is not node])
        if why.startswith("the repair budget"):
            why = ""  # this node is the one the budget let out
        why = why or self.replace(node, f"{fault}; ")
        if not why:
            return
        self.note(node, REPAIR, f"held {now()}: {fault} (held: {why})")
        self.say(f"{name}: {fault}: held: {why}")

    def gpu_pods(self) -> list[dict[str, Any]]:
        """The pods that have not ended and ask for GPUs (listed once a pass: each faulty
        node of the pass looks at its own)."""
        if self.pods is None:
            pods = self.api.call("GET", "/api/v1/pods")["items"]
            self.pods = [p for p in pods if p["spec"].get("nodeName") and gpu_busy([p])]
        return self.pods

    def evict(self, pod: dict[str, Any]) -> None:
        """Evict a pod (the Eviction API: its PodDisruptionBudget is respected)."""
        meta = pod["metadata"]
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        }
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/eviction"
        try:
            self.api.call("POST", path, body)
        except ApiError as err:
            # 429: its disruption budget says not now (next pass asks again); 404: gone.
            if err.status not in (404, 429):
                raise
        else:
            self.say(f"{pod['spec'].get('nodeName')}: evicted {meta['namespace']}/{meta['name']}")

    def replace(self, node: dict[str, Any], what: str = "") -> str:
        """Have the node's instance replaced and say so on it (``replacing TIME: WHAT...``);
        "" when asked, else why it could not be (AWS's refusal)."""
        instance = instance_of(node)
        try:
            asked = self.repairs.replace_node(node)
        except AwsError as err:
            return f"replacing it failed: {err}"
        said = (
            f"instance {instance} terminated; its node group launches a replacement"
            if asked
            else f"instance {instance} had ended already (not in its group: another repair "
            "got there first); its node leaves with it"
        )
        self.say(f"{node['metadata']['name']}: replacing: {said}")
        try:
            self.note(node, REPAIR, f"replacing {now()}: {what}{said}")
        except ApiError as err:
            if err.status != 404:  # gone already: its instance went first
                raise
        return ""

    def joined(self, node: dict[str, Any]) -> None:
        """Without the gate, a node of the pool that is Ready counts as verified: the
        replacement it may be frees its place in the budget (once per node)."""
        uid = str(node["metadata"].get("uid") or node["metadata"]["name"])
        if uid in self.joined_nodes or unhealthy(node) or agent_fault(node):
            return
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (node.get("status") or {}).get("conditions") or []
        )
        if ready:
            self.joined_nodes.add(uid)
            self.repairs.verdict(node, ok=True)

    def repair(self, node: dict[str, Any], pool_nodes: list[dict[str, Any]]) -> None:
        """Replace a node that failed the gate, or say why it is held (once per reason)."""
        meta = node["metadata"]
        status = (meta.get("annotations") or {}).get(REPAIR, "")
        if not self.repairs.configured or status.startswith("replacing"):
            return  # its instance is going; its node leaves with it
        why = self.repairs.hold(node, pool_nodes) or self.replace(node)
        if not why:
            return
        if status.split(": ", 1)[-1] != why:
            self.note(node, REPAIR, f"held {now()}: {why}")
            self.say(f"{meta['name']}: held: {why}")

    def note(self, node: dict[str, Any], key: str, text: str) -> None:
        """Set one annotation of the node."""
        self.api.call(
            "PATCH",
            f"/api/v1/nodes/{node['metadata']['name']}",
            {"metadata": {"annotations": {key: text}}},
            "application/merge-patch+json",
        )

    def verdict(
        self, node: dict[str, Any], text: str, lift: bool, record: dict[str, Any] | None = None
    ) -> None:
        """Record the verdict on the node (and lift the taint), only if the node is as read,
        with ``record``'s annotations. A node starting its pair starts with no pair tried."""
        meta = node["metadata"]
        notes: dict[str, Any] = {VERDICT: text, **(record or {})}
        if text.startswith("pairing") and PAIR in (meta.get("annotations") or {}):
            notes[PAIR] = None
        patch: dict[str, Any] = {
            "metadata": {"resourceVersion": meta.get("resourceVersion"), "annotations": notes}
        }
        if lift:
            keep = [t for t in node["spec"].get("taints") or [] if t.get("key") != TAINT]
            patch["spec"] = {"taints": keep}
            if REPAIR in (meta.get("annotations") or {}):
                patch["metadata"]["annotations"][REPAIR] = None  # held no more
        self.api.call(
            "PATCH", f"/api/v1/nodes/{meta['name']}", patch, "application/merge-patch+json"
        )

    def failures(self, job: str) -> str:
        """The FAIL lines of the Job's containers' logs, joined."""
        pods_path = f"/api/v1/namespaces/{self.namespace}/pods"
        selector = urllib.parse.quote(f"batch.kubernetes.io/job-name={job}")
        lines: list[str] = []
        for pod in self.api.call("GET", f"{pods_path}?labelSelector={selector}")["items"]:
            for container in pod["spec"].get("containers", []):
                path = f"{pods_path}/{pod['metadata']['name']}/log?container={container['name']}"
                try:
                    log = str(self.api.call("GET", path))
                except ApiError:
                    continue
                lines += [ln.strip() for ln in log.splitlines() if ln.startswith("FAIL")]
        return "; ".join(lines)[:1000]

    def delete(self, jobs_path: str, name: str) -> None:
        """Delete a Job and its pods."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        try:
            self.api.call("DELETE", f"{jobs_path}/{name}", body)
        except ApiError as err:
            if err.status != 404:
                raise


def load_templates(folder: Path, kind: str = "") -> dict[str, Any]:
    """The pools' Job templates (``POOL.json``), or their pair templates (``kind`` "pair":
    ``POOL.pair.json``)."""
    suffix = f".{kind}.json" if kind else ".json"
    return {
        p.name.removesuffix(suffix): json.loads(p.read_text())
        for p in sorted(folder.glob(f"*{suffix}"))
        if kind or p.name.count(".") == 1
    }


def _annotation(node: dict[str, Any], key: str) -> str:
    return str((node["metadata"].get("annotations") or {}).get(key, ""))


def _verdict(node: dict[str, Any]) -> str:
    return str((node["metadata"].get("annotations") or {}).get(VERDICT, ""))


def _said(tried: list[tuple[str, float | None]]) -> list[str]:
    return [f"{p}={'-' if f is None else 'x' if f == NOT_RUN else f'{f:g}'}" for p, f in tried]


def _epoch(stamp: str) -> float | None:
    """An API time (``2026-12-06T09:00:00Z``) in epoch seconds; None if it is not one."""
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def _age(stamp: str) -> float:
    """Seconds since an API time."""
    then = _epoch(stamp)
    return 0.0 if then is None else time.time() - then


def main(argv: list[str] | None = None) -> int:
    """Run passes every ``--interval`` seconds (one with ``--once``)."""
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--namespace", default="fmctl-system")
    args.add_argument("--templates", type=Path, default=Path("/opt/fmctl/jobs"))
    args.add_argument("--interval", type=float, default=30.0)
    args.add_argument("--once", action="store_true")
    args.add_argument("--alive", type=Path, help="touched after every pass (liveness)")
    args.add_argument(
        "--settings", type=Path, help="_settings.json: region, replace, budgets, pair floors"
    )
    args.add_argument("--server", help="the API's URL (in a pod: the kubernetes Service's)")
    args.add_argument(
        "--account", type=Path, default=Path(ACCOUNT), help="token and ca.crt (in a pod: its own)"
    )
    opts = args.parse_args(argv)
    server = server_url(opts.server)
    if not server:
        print("error: not in a cluster and no --server", file=sys.stderr)
        return 1
    api = Api(server, opts.account)
    controller = Controller(
        api,
        opts.namespace,
        load_templates(opts.templates),
        *load_settings(opts.settings),
        load_templates(opts.templates, "pair"),
    )
    return run_passes(controller.run_pass, controller.say, opts.interval, opts.once, opts.alive)


if __name__ == "__main__":
    sys.exit(main())
