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
- deletes its Jobs whose node is gone or no longer tainted.

A Job is named after the node's uid, not its name: EC2 reuses private IP addresses, so a
replacement can carry a gone node's name and must be verified anew.

Python's standard library only, in-cluster credentials (the pod's service account token,
re-read for every request: the kubelet rotates it). ``--once`` makes one pass.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aws_call import AutoScaling, AwsError

TAINT = "fmctl.dev/unverified"
POOL_LABEL = "fmctl.dev/pool"
VERDICT = "fmctl.dev/verify"
REPAIR = "fmctl.dev/verify-repair"
#: The taint fmctl puts on a Capacity Block's nodes in its last hour (block_ends).
BLOCK_ENDING = "fmctl.dev/capacity-block-ending"
#: Replacements of a pool that may fail the gate in a row before the rest are held.
REPLACEMENTS_IN_A_ROW = 3
#: A replacement not seen verified after this many passes no longer counts in the budget
#: (an hour at the default 30 s: a node joins in minutes).
REPLACEMENT_PASSES = 120
APP = "fmctl-verify"
#: What fmctl's rendered Job template says where the Job's name and node go.
NAME_STANDIN, NODE_STANDIN = "fmctl-job-name-standin", "fmctl-node-name-standin"
ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
#: Passes that may fail in a row before the controller exits.
GIVE_UP = 20


class ApiError(Exception):
    """The API server refused a request."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class Api:
    """The cluster's API as the pod's service account sees it."""

    def __init__(self, server: str, account: Path) -> None:
        self.server = server.rstrip("/")
        self.account = account
        ca = account / "ca.crt"
        self.tls = ssl.create_default_context(cafile=str(ca)) if ca.exists() else None

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        ctype: str = "application/json",
    ) -> Any:
        """One request; the decoded JSON answer (text for a log)."""
        token = (self.account / "token").read_text().strip()
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.tls) as answer:
                text = answer.read().decode()
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")
            with contextlib.suppress(ValueError):
                detail = json.loads(detail).get("message", detail)
            raise ApiError(err.code, detail) from None
        if "/log" in path.split("?")[0]:
            return text
        return json.loads(text) if text else {}


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


def passed(node: dict[str, Any]) -> bool:
    """Has the node passed the gate (taint lifted, or a passed verdict)?"""
    verdict = (node["metadata"].get("annotations") or {}).get(VERDICT, "")
    return verdict.startswith("passed") or not tainted(node)


class Repairs:
    """Replacing the nodes that failed the gate, within each pool's budget.

    ``replace``: health.repair is replace (else a failed node is only held); ``budgets``:
    nodes of each pool that may be in repair at once (health.maxInRepair, as fmctl computed
    it for the pool's size). A replacement counts in its pool's budget from the termination
    until a node that joined after it gets its verdict. What it remembers is in memory; a
    controller started again counts the failed nodes still marked ``replacing``.
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
        #: Pool -> the passes at which its replacements were asked for, oldest first.
        self.pending: dict[str, list[int]] = {}
        #: Pool -> its replacements that failed the gate in a row.
        self.failed_in_a_row: dict[str, int] = {}
        #: Nodes (uid) that joined while a replacement of their pool was pending.
        self.replacements: set[str] = set()
        self.seen: set[str] | None = None
        self.passes = 0

    def look(self, nodes: list[dict[str, Any]]) -> None:
        """Start a pass: note the nodes that joined since the last."""
        self.passes += 1
        for pool, asked in self.pending.items():
            self.pending[pool] = [a for a in asked if self.passes - a < REPLACEMENT_PASSES]
        uids = {str(n["metadata"].get("uid")) for n in nodes}
        if self.seen is None:
            # Started (again): what is being replaced is what is marked so.
            for node in nodes:
                status = (node["metadata"].get("annotations") or {}).get(REPAIR, "")
                if status.startswith("replacing"):
                    pool = node["metadata"]["labels"][POOL_LABEL]
                    self.pending.setdefault(pool, []).append(self.passes)
        else:
            for node in nodes:
                uid = str(node["metadata"].get("uid"))
                if uid not in self.seen and self.pending.get(
                    node["metadata"]["labels"][POOL_LABEL]
                ):
                    self.replacements.add(uid)
        self.seen = uids

    def verdict(self, node: dict[str, Any], ok: bool) -> None:
        """A node got its verdict: a replacement's frees its place in the budget."""
        uid = str(node["metadata"].get("uid"))
        if uid not in self.replacements:
            return
        self.replacements.discard(uid)
        pool = node["metadata"]["labels"][POOL_LABEL]
        if self.pending.get(pool):
            self.pending[pool].pop(0)
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

    def replace_node(self, node: dict[str, Any]) -> None:
        """Terminate the node's instance in its Auto Scaling group (``hold`` said it may)."""
        assert self.aws is not None
        self.aws.replace(instance_of(node))
        pool = node["metadata"]["labels"][POOL_LABEL]
        self.pending.setdefault(pool, []).append(self.passes)


def load_repairs(path: Path | None) -> Repairs:
    """The repair settings fmctl rendered (``repair.json``: region, replace, budgets)."""
    if path is None or not path.exists():
        return Repairs(None, False, {}, configured=False)
    data = json.loads(path.read_text())
    replace = bool(data.get("replace"))
    aws = AutoScaling(str(data["region"])) if replace else None
    return Repairs(aws, replace, {k: int(v) for k, v in (data.get("budgets") or {}).items()})


class Controller:
    """One cluster's gate: the API, the namespace its Jobs run in, the pools' templates,
    and how it repairs."""

    def __init__(
        self,
        api: Api,
        namespace: str,
        templates: dict[str, Any],
        repairs: Repairs | None = None,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.templates = templates
        self.repairs = repairs or Repairs(None, False, {}, configured=False)

    def say(self, line: str) -> None:
        """A line of the controller's log."""
        print(f"{now()} {line}", flush=True)

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
        self.repairs.look(gpu_nodes)
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
        if outcome == "Complete":
            self.verdict(node, f"passed {now()}", lift=True)
            self.repairs.verdict(node, ok=True)
            self.delete(jobs_path, name)
            self.say(f"{meta['name']}: passed, {TAINT} lifted")
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
            self.verdict(node, f"failed {now()}: {what}", lift=False)
            self.repairs.verdict(node, ok=False)
            # What failed is on the node now; a person who clears the verdict gets a new run.
            self.delete(jobs_path, name)
            self.say(f"{meta['name']}: failed, kept out of service: {what}")

    def repair(self, node: dict[str, Any], pool_nodes: list[dict[str, Any]]) -> None:
        """Replace a node that failed the gate, or say why it is held (once per reason)."""
        meta = node["metadata"]
        status = (meta.get("annotations") or {}).get(REPAIR, "")
        if not self.repairs.configured or status.startswith("replacing"):
            return  # its instance is going; its node leaves with it
        why = self.repairs.hold(node, pool_nodes)
        if not why:
            instance = instance_of(node)
            try:
                self.repairs.replace_node(node)
            except AwsError as err:
                why = f"replacing it failed: {err}"
            else:
                said = f"instance {instance} terminated; its node group launches a replacement"
                self.say(f"{meta['name']}: replacing: {said}")
                try:
                    self.note(node, REPAIR, f"replacing {now()}: {said}")
                except ApiError as err:
                    if err.status != 404:  # gone already: its instance went first
                        raise
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

    def verdict(self, node: dict[str, Any], text: str, lift: bool) -> None:
        """Record the verdict on the node (and lift the taint), only if the node is as read."""
        meta = node["metadata"]
        patch: dict[str, Any] = {
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "annotations": {VERDICT: text},
            }
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


def load_templates(folder: Path) -> dict[str, Any]:
    """The pools' Job templates (``POOL.json``)."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def main(argv: list[str] | None = None) -> int:
    """Run passes every ``--interval`` seconds (one with ``--once``)."""
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--namespace", default="fmctl-system")
    args.add_argument("--templates", type=Path, default=Path("/opt/fmctl/jobs"))
    args.add_argument("--interval", type=float, default=30.0)
    args.add_argument("--once", action="store_true")
    args.add_argument("--alive", type=Path, help="touched after every pass (liveness)")
    args.add_argument("--repair", type=Path, help="repair.json: region, replace, budgets")
    args.add_argument("--server", help="the API's URL (in a pod: the kubernetes Service's)")
    args.add_argument(
        "--account", type=Path, default=Path(ACCOUNT), help="token and ca.crt (in a pod: its own)"
    )
    opts = args.parse_args(argv)
    server = opts.server
    if not server:
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            print("error: not in a cluster and no --server", file=sys.stderr)
            return 1
        server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    api = Api(server, opts.account)
    controller = Controller(
        api, opts.namespace, load_templates(opts.templates), load_repairs(opts.repair)
    )
    failed = 0
    while True:
        try:
            controller.run_pass()
        except (ApiError, OSError) as err:
            failed += 1
            controller.say(f"pass failed: {err} (next pass tries again)")
            if opts.once:
                return 1
            if failed >= GIVE_UP:
                # Its kubelet starts it again (with back-off); a process whose API has
                # gone for good (a sandbox stopped under it) ends.
                controller.say(f"{failed} passes failed in a row: exiting")
                return 1
        else:
            failed = 0
            if opts.alive is not None:
                opts.alive.touch()
        if opts.once:
            return 0
        time.sleep(opts.interval)


if __name__ == "__main__":
    sys.exit(main())
