"""Kueue and NVIDIA's DRA driver in the sandbox, end to end: `up` installs both upstream
charts from the chart mirror (the release copies in shared/), the NCCL test is admitted as
one gang and placed by the network topology with ranks in its order, a job larger than the
quota waits whole, `status` shows the queue and the ComputeDomains, and on GB200 each job's
ComputeDomain forms across its UltraServer (judged from its status, node by node).

The sandbox's Kueue and DRA driver are stand-ins (fmctl_sandbox/kube_kueue.py and
kube_dra.py say what they do and leave out); the charts, their CRDs and CEL rules, the
values and the objects fmctl writes are the real ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from provisioner.catalog import load_catalog
from provisioner.check.judge import judge_domain
from provisioner.drivers import yamlio
from provisioner.render import render
from provisioner.render.context import build_context
from provisioner.render.queueing import ULTRASERVER_LABEL
from provisioner.spec.source import load_source
from provisioner.validate import validate_document
from tests.conftest import ROOT
from tests.engine.harness import Sandbox, kube_client, owned, quick_torchrun, region_of, until

B300 = ROOT / "examples/p6-b300-eks-capacity-block.yaml"
GB200 = ROOT / "tests/data/specs/gb200-eks.yaml"
LAYERS = [f"topology.k8s.aws/network-node-layer-{i}" for i in (1, 2, 3, 4)]


def _spec(tmp: Path, source: Path, name: str) -> Path:
    data = yaml.safe_load(source.read_text())
    data["metadata"]["name"] = name
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _rendered(spec: Path) -> dict[str, str]:
    doc, problems = load_source(str(spec))
    assert not problems
    result = validate_document(doc)
    assert result.ok and result.resolved is not None
    return render(result.resolved, load_catalog()).files


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yamlio.load_all(text) if d]


def _workloads(api: Any) -> dict[str, dict[str, Any]]:
    return {w["metadata"]["name"]: w for w in api.list("kueue.x-k8s.io/v1beta2", "Workload")}


def _state(wl: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (wl.get("status") or {}).get("conditions") or []}


def test_kueue_admits_the_nccl_test_as_one_gang_in_topology_order(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    name = "e2e-kueue"
    spec = _spec(tmp_path, B300, name)
    region = region_of(spec)
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "applied 79 objects of kueue 0.19.2" in up.stdout
    api = kube_client(sandbox, name, region, "kubectl")
    try:
        # The chart's CRDs are served, fmctl's queues exist (and passed their CEL rules).
        assert api.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", "training") is not None
        assert api.get("kueue.x-k8s.io/v1beta2", "LocalQueue", "training", "training")
        # `up` did not start the queued NCCL test (Kueue would have admitted it at once).
        assert api.get("batch/v1", "Job", "nccl-allreduce", "training") is None

        files = _rendered(spec)
        for doc in _docs(files["kubernetes/nccl-test/job.yaml"]):
            api.apply(doc)
        # Three nodes' worth of GPUs on a two-node pool: more than the queue's quota.
        big = next(d for d in _docs(files["kubernetes/nccl-test/job.yaml"]) if d["kind"] == "Job")
        big["metadata"]["name"] = "nccl-big"
        big["spec"]["completions"] = big["spec"]["parallelism"] = 3
        api.apply(big)

        def admitted() -> dict[str, Any] | None:
            found = [
                w for w in _workloads(api).values() if "nccl-allreduce" in w["metadata"]["name"]
            ]
            return found[0] if found and "Admitted" in _state(found[0]) else None

        wl = until("the NCCL test's admission", admitted)
        assignment = wl["status"]["admission"]["podSetAssignments"][0]
        assert assignment["count"] == 2 and assignment["flavors"]["nvidia.com/gpu"] == "b300"
        pods = {
            p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]: p
            for p in api.list(
                "v1", "Pod", "training", "batch.kubernetes.io/job-name=nccl-allreduce"
            )
        }
        assert set(pods) == {"0", "1"} and all(p["spec"].get("nodeName") for p in pods.values())
        # Ranks in the topology's order: rank 0 on the node first in network order.
        nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in api.list("v1", "Node")}
        placed = [pods[i]["spec"]["nodeName"] for i in ("0", "1")]
        assert placed == sorted(placed, key=lambda n: ([nodes[n][lv] for lv in LAYERS], n))
        roots = assignment["topologyAssignment"]["slices"][0]["valuesPerLevel"][0]
        assert roots["individual"]["roots"] == placed

        big_wl = next(w for w in _workloads(api).values() if "nccl-big" in w["metadata"]["name"])
        waiting = _state(big_wl)["QuotaReserved"]
        assert waiting["status"] == "False"
        assert "insufficient unused quota for nvidia.com/gpu in flavor b300" in waiting["message"]
        # Pending whole: not one of its pods exists.
        assert api.list("v1", "Pod", "training", "batch.kubernetes.io/job-name=nccl-big") == []

        status = sandbox.fmctl("status", name, "--region", region, "--sandbox", "-o", "json")
        assert status.returncode == 0, status.stderr
        (queue,) = json.loads(status.stdout)["kubernetes"]["queues"]
        assert queue["name"] == "training" and queue["pending"] == 1
        states = {w["name"].rsplit("-", 1)[0]: w["state"] for w in queue["workloads"]}
        assert states["job-nccl-big"] == "pending"
        text = sandbox.fmctl("status", name, "--region", region, "--sandbox")
        assert "queue training:" in text.stdout and "insufficient unused quota" in text.stdout

        # Queueing turned off: Kueue goes, its webhooks first (left behind with no controller
        # to answer them, they would refuse every Job), and up starts the NCCL test itself.
        for job in ("nccl-allreduce", "nccl-big"):
            api.delete("batch/v1", "Job", job, "training")
        data = yaml.safe_load(spec.read_text())
        data.setdefault("kubernetes", {})["queueing"] = "none"
        spec.write_text(yaml.safe_dump(data, sort_keys=False))
        off = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
        assert off.returncode == 0, off.stdout + off.stderr
        said = off.stdout
        assert "ValidatingWebhookConfiguration kueue-validating-webhook-configuration" in said
        assert "deleted  kueue-system" in said
        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            left = api.list("admissionregistration.k8s.io/v1", kind, selector="fmctl.dev/chart")
            assert left == [], left
        assert api.get("v1", "Namespace", "kueue-system") is None
        assert api.get("batch/v1", "Job", "nccl-allreduce", "training") is not None
    finally:
        api.close()
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert owned(sandbox, name, region) == []


def test_gb200_jobs_get_a_compute_domain_across_their_ultraserver(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    name = "e2e-nvl72"
    spec = _spec(tmp_path, GB200, name)
    region = region_of(spec)
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "applied 22 objects of nvidia-dra-driver-gpu 25.12.0" in up.stdout
    api = kube_client(sandbox, name, region, "kubectl")
    quick_torchrun(sandbox, tmp_path)
    try:
        # Every GB200 node carries its UltraServer (the capacityBlockId EC2 gives it).
        gb200 = api.list("v1", "Node", selector="fmctl.dev/pool=nvl72")
        blocks = {n["metadata"]["labels"].get(ULTRASERVER_LABEL) for n in gb200}
        assert len(gb200) == 18 and len(blocks) == 1 and None not in blocks
        # Only the DeviceClasses of ComputeDomains: the GPUs stay the device plugin's.
        classes = {d["metadata"]["name"] for d in api.list("resource.k8s.io/v1", "DeviceClass")}
        assert classes == {
            "compute-domain-daemon.nvidia.com",
            "compute-domain-default-channel.nvidia.com",
        }

        files = _rendered(spec)
        for doc in _docs(files["kubernetes/nccl-test/job.yaml"]):
            api.apply(doc)

        def formed() -> dict[str, Any] | None:
            domain = api.get(
                "resource.nvidia.com/v1beta1", "ComputeDomain", "nccl-allreduce", "training"
            )
            nodes = ((domain or {}).get("status") or {}).get("nodes") or []
            return domain if len(nodes) == 2 else None

        domain = until("the ComputeDomain's two nodes", formed)
        pods = api.list("v1", "Pod", "training", "batch.kubernetes.io/job-name=nccl-allreduce")
        ran_on = sorted(p["spec"]["nodeName"] for p in pods)
        assert sorted(n["name"] for n in domain["status"]["nodes"]) == ran_on
        context = build_context(
            validate_document(load_source(str(spec))[0]).resolved, load_catalog()
        )  # type: ignore[arg-type]
        pool = context.pools[0]
        verdict = judge_domain(pool, domain["status"], ran_on)
        assert verdict.ok, verdict.findings
        # The judge does not take the domain's word alone: a node missing from it fails.
        assert not judge_domain(pool, domain["status"], [*ran_on, "ip-10-9-9-9"]).ok

        # Kueue counts a pod's channel claim by its DeviceClass: without the mapping fmctl
        # writes into Kueue's configuration, the job would never be admitted.
        config_map = next(
            c
            for c in api.list("v1", "ConfigMap", "kueue-system")
            if "controller_manager_config.yaml" in (c.get("data") or {})
        )
        config = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
        config.pop("resources")
        config_map["data"]["controller_manager_config.yaml"] = yaml.safe_dump(config)
        for key in ("managedFields", "resourceVersion", "uid", "creationTimestamp"):
            config_map["metadata"].pop(key, None)
        api.apply(config_map, force=True)
        job = next(d for d in _docs(files["kubernetes/nccl-test/job.yaml"]) if d["kind"] == "Job")
        job["metadata"]["name"] = "unmapped"
        api.apply(job)

        def refused() -> str | None:
            found = [w for w in _workloads(api).values() if "unmapped" in w["metadata"]["name"]]
            said = _state(found[0]).get("QuotaReserved", {}) if found else {}
            return str(said.get("message", "")) or None

        assert "DeviceClass compute-domain-default-channel.nvidia.com is not mapped" in until(
            "Kueue's refusal", refused
        )
        status = sandbox.fmctl("status", name, "--region", region, "--sandbox", "-o", "json")
        domains = json.loads(status.stdout)["kubernetes"]["computeDomains"]
        assert domains == [
            {
                "namespace": "training",
                "name": "nccl-allreduce",
                "status": "Ready",
                "nodes": 2,
                "ready": 2,
            }
        ]
    finally:
        sandbox.node_tools(None)
        api.close()
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert owned(sandbox, name, region) == []
