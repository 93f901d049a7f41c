"""Idle GPU nodes removed on EKS (cost.idle.action: scale-down), end to end in the sandbox:
`up` tags the pool's Auto Scaling group and runs the Cluster Autoscaler with a role that may
scale only that group; the idle nodes go; a queued NCCL test gets its nodes back through
Kueue's ProvisioningRequest, all of them at once, and runs on them; idle again, they go
again; a later `up` leaves the autoscaler's size alone; `down` leaves nothing.

The autoscaler and Kueue's admission check are the sandbox's stand-ins
(fmctl_sandbox/eks_autoscaler.py and kube_kueue_checks.py say what they follow and
leave out); the manifests, the tags, the role's policy and the CRDs are fmctl's, judged by
the sandbox as AWS and Kubernetes would judge them.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import yaml

from provisioner.drivers import yamlio
from tests.engine.harness import (
    Sandbox,
    kill_after,
    kube_client,
    quick_torchrun,
    raw_leftovers,
    region_of,
    spec_file,
    until,
)
from tests.engine.test_kueue import _docs, _rendered

NAME = "e2e-autoscale"
POOL = "gpu"
KUEUE_API = "kueue.x-k8s.io/v1beta2"


def _spec(tmp: Path) -> Path:
    data = yaml.safe_load(spec_file(tmp, NAME).read_text())
    data["compute"]["gpuPools"][0]["count"] = 2
    data["storage"] = {}  # no FSx: not what this test is about, and slow to make
    data["cost"] = {"idle": {"after": "10m", "action": "scale-down"}}
    # No verify gate: these nodes' tools run a torchrun only (its own e2e is
    # test_verify_gate.py), and a node the gate holds is not idle.
    data.setdefault("health", {})["verify"] = {"kubernetesGate": False}
    path = tmp / f"{NAME}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _pool_nodes(sandbox: Sandbox, region: str) -> list[str]:
    api = kube_client(sandbox, NAME, region)
    try:
        return sorted(
            n["metadata"]["name"]
            for n in api.list("v1", "Node", selector=f"eks.amazonaws.com/nodegroup={POOL}")
        )
    finally:
        api.close()


def _desired(sandbox: Sandbox, region: str) -> int:
    eks = sandbox.aws(region).client("eks")
    group = eks.describe_nodegroup(clusterName=NAME, nodegroupName=POOL)["nodegroup"]
    return int(group["scalingConfig"]["desiredSize"])


def _status(sandbox: Sandbox, region: str) -> str:
    api = kube_client(sandbox, NAME, region)
    try:
        cm = api.get("v1", "ConfigMap", "cluster-autoscaler-status", "kube-system") or {}
        data = cm.get("data") or {}
        return f"{data.get('status', '')}\n{data.get('events', '')}"
    finally:
        api.close()


def _nccl(spec: Path) -> list[dict[str, Any]]:
    return _docs(_rendered(spec)["kubernetes/nccl-test/job.yaml"])


def test_idle_nodes_go_and_a_queued_job_brings_them_back(sandbox: Sandbox, tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    region = region_of(spec)
    quick_torchrun(sandbox, tmp_path)
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        aws = sandbox.aws(region)
        eks = aws.client("eks")
        group = eks.describe_nodegroup(clusterName=NAME, nodegroupName=POOL)["nodegroup"]
        assert group["scalingConfig"]["minSize"] == 0 and group["scalingConfig"]["maxSize"] == 2
        assert group["labels"]["k8s.amazonaws.com/accelerator"] == "nvidia-h200"
        asg = group["resources"]["autoScalingGroups"][0]["name"]
        found = aws.client("autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[asg])[
            "AutoScalingGroups"
        ][0]
        tags = {t["Key"]: t["Value"] for t in found["Tags"]}
        template = "k8s.io/cluster-autoscaler/node-template/"
        assert tags["fmctl.dev/autoscaler"] == NAME
        assert tags[f"{template}label/fmctl.dev/pool"] == POOL
        assert tags[f"{template}taint/nvidia.com/gpu"] == "true:NoSchedule"
        assert tags[f"{template}resources/nvidia.com/gpu"] == "8"
        assert tags[f"{template}resources/vpc.amazonaws.com/efa"] == "16"
        associations = eks.list_pod_identity_associations(clusterName=NAME)["associations"]
        assert ("kube-system", "cluster-autoscaler") in {
            (a["namespace"], a["serviceAccount"]) for a in associations
        }
        api = kube_client(sandbox, NAME, region)
        try:
            check = api.get(KUEUE_API, "AdmissionCheck", "fmctl-capacity")
            assert check is not None
            active = {c["type"]: c for c in check["status"]["conditions"]}["Active"]
            assert active["status"] == "True", check["status"]  # the CRD came before Kueue
        finally:
            api.close()

        # The pool runs nothing: after cost.idle.after (10 minutes, on the sandbox's clock)
        # the autoscaler removes both nodes, to the group's minimum of 0.
        until("the idle nodes to go", lambda: _desired(sandbox, region) == 0, 60)
        until("the nodes to leave", lambda: _pool_nodes(sandbox, region) == [], 60)
        assert "removed" in _status(sandbox, region)
        # `status` says why the pool has no node.
        shown = sandbox.fmctl("status", NAME, "--region", region, "--sandbox", "-o", "json")
        assert shown.returncode in (0, 1), shown.stdout + shown.stderr
        kubernetes = json.loads(shown.stdout)["kubernetes"]
        assert kubernetes["autoscaled"] == [{"pool": POOL, "min": 0, "max": 2, "desired": 0}]
        assert {"pool": POOL, "nodes": []} in kubernetes["pools"]
        # The autoscaler itself is one of the in-cluster stack's Deployments status watches.
        (autoscaler,) = [s for s in kubernetes["stack"] if s["name"] == "cluster-autoscaler"]
        assert (autoscaler["kind"], autoscaler["namespace"]) == ("Deployment", "kube-system")
        text = sandbox.fmctl("status", NAME, "--region", region, "--sandbox").stdout
        assert f"pool {POOL}: 0 nodes (the Cluster Autoscaler sizes it, 0 to 2" in text

        # A job queued for the pool: Kueue reserves its quota, asks for its two nodes with a
        # ProvisioningRequest, the autoscaler adds them at once, and once they have joined
        # Kueue places the job on them by topology.
        api = kube_client(sandbox, NAME, region)
        try:
            for doc in _nccl(spec):
                api.apply(doc)
            job = api.get("batch/v1", "Job", "nccl-allreduce", "training")
            assert job is not None
            job["spec"]["suspend"] = False  # as `fmctl check` starts it
            api.apply(job)

            def workload() -> dict[str, Any] | None:
                found = [
                    w
                    for w in api.list(KUEUE_API, "Workload", "training")
                    if "nccl-allreduce" in w["metadata"]["name"]
                ]
                return found[0] if found else None

            def admitted() -> dict[str, Any] | None:
                wl = workload()
                states = {
                    c["type"]: c for c in ((wl or {}).get("status") or {}).get("conditions") or []
                }
                done = states.get("Admitted", {}).get("status") == "True"
                return wl if done else None

            wl = until("the job's admission", admitted, 120)
            (check_state,) = wl["status"]["admissionChecks"]
            assert check_state["name"] == "fmctl-capacity" and check_state["state"] == "Ready"
            requests = api.list("autoscaling.x-k8s.io/v1", "ProvisioningRequest", "training")
            (request,) = requests
            assert request["spec"]["provisioningClassName"] == (
                "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
            )
            assert request["spec"]["podSets"][0]["count"] == 2
            provisioned = {c["type"]: c for c in request["status"]["conditions"]}["Provisioned"]
            assert provisioned["reason"] == "CapacityIsProvisioned"
            assert _desired(sandbox, region) == 2
            nodes = _pool_nodes(sandbox, region)
            pods = api.list("v1", "Pod", "training", "batch.kubernetes.io/job-name=nccl-allreduce")
            assert sorted(p["spec"].get("nodeName") for p in pods) == nodes

            def finished() -> bool:
                job = api.get("batch/v1", "Job", "nccl-allreduce", "training") or {}
                conditions = (job.get("status") or {}).get("conditions") or []
                return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)

            until("the job to finish", finished, 120)
        finally:
            api.close()

        # Idle again: once the capacity's booking ends and the nodes have been unneeded long
        # enough, they go again.
        until("the nodes to go again", lambda: _desired(sandbox, region) == 0, 120)

        # A later `up` leaves the autoscaler's size alone (0 of 2, within the bounds).
        plan = sandbox.fmctl("plan", "-f", str(spec), "--sandbox", "-o", "json")
        assert plan.returncode == 0, plan.stdout + plan.stderr
        (pool,) = [
            c for c in json.loads(plan.stdout)["changes"] if c["resource"] == f"nodegroup/{POOL}"
        ]
        changes = pool
        assert changes["action"] == "unchanged", changes
    finally:
        sandbox.node_tools(None)
        down = sandbox.fmctl("down", NAME, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, NAME, region) == []


def test_the_autoscaler_can_scale_only_what_its_role_allows(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """Its role may change only groups tagged for the cluster: without that statement it
    removes nothing, and says why; the next `up` gives the role its policy back."""
    spec = _spec(tmp_path)
    region = region_of(spec)
    data = yaml.safe_load(spec.read_text())
    # Two hours (14 s on the sandbox's clock): long enough to take the right away first.
    data["cost"]["idle"]["after"] = "2h"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        iam = sandbox.aws(region).client("iam")
        roles = [
            r["RoleName"]
            for r in iam.list_roles()["Roles"]
            if "cluster-autoscaler" in r["RoleName"] and NAME in r["RoleName"]
        ]
        (role,) = roles
        (policy,) = iam.list_role_policies(RoleName=role)["PolicyNames"]
        document = iam.get_role_policy(RoleName=role, PolicyName=policy)["PolicyDocument"]
        if isinstance(document, str):
            document = json.loads(document)
        statements = document["Statement"]
        write = next(s for s in statements if "Condition" in s)
        assert write["Condition"] == {
            "StringEquals": {"autoscaling:ResourceTag/fmctl.dev/autoscaler": NAME}
        }
        reads = [s for s in statements if s is not write]
        iam.put_role_policy(
            RoleName=role,
            PolicyName=policy,
            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": reads}),
        )
        said = until(
            "the autoscaler to be refused",
            lambda: "AccessDenied" in (text := _status(sandbox, region)) and text,
            60,
        )
        assert "autoscaling:terminateInstanceInAutoScalingGroup" in said
        assert _desired(sandbox, region) == 2 and len(_pool_nodes(sandbox, region)) == 2

        # `up` puts the policy back: the nodes, unneeded for long enough, go.
        again = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "iam/cluster-autoscaler" in again.stdout
        until("the idle nodes to go", lambda: _desired(sandbox, region) == 0, 60)
    finally:
        down = sandbox.fmctl("down", NAME, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, NAME, region) == []


def test_kueue_started_before_the_provisioning_api_admits_nothing_there() -> None:
    """The sandbox holds fmctl to Kueue's rule: its provisioning check runs only if the
    ProvisioningRequest API was served as Kueue started. Started before, the check stays
    inactive and the ClusterQueue admits nothing; the pods rolled (fmctl's annotation), it
    is active."""
    from fmctl_sandbox import kube_kueue
    from fmctl_sandbox.crd_schema import Crd
    from fmctl_sandbox.kube_model import Cluster
    from tests.conftest import SHARED

    spec = _spec(Path(tempfile.mkdtemp()))
    files = _rendered(spec)
    c = Cluster("demo", version="1.35")
    for path in sorted((SHARED / "schemas/kueue-v0.19.2").glob("*.yaml")):
        crd = Crd.from_object(yaml.safe_load(path.read_text()))
        c.crds[crd.plural] = crd

    def put(plural: str, ns: str, obj: dict[str, Any]) -> None:
        obj["metadata"].setdefault("uid", f"uid-{obj['metadata']['name']}")
        c.objects[(plural, ns, obj["metadata"]["name"])] = obj

    plurals = {
        "Topology": "topologies",
        "ResourceFlavor": "resourceflavors",
        "AdmissionCheck": "admissionchecks",
        "ProvisioningRequestConfig": "provisioningrequestconfigs",
        "ClusterQueue": "clusterqueues",
        "LocalQueue": "localqueues",
    }
    for obj in yamlio.load_all(files["kubernetes/kueue/queues.yaml"]):
        if obj:
            put(plurals[obj["kind"]], obj["metadata"].get("namespace", ""), obj)
    config = yaml.safe_load(files["charts/kueue-values.yaml"])
    text = config["managerConfig"]["controllerManagerConfigYaml"]
    put(
        "configmaps",
        "kueue-system",
        {"metadata": {"name": "manager-config"}, "data": {"controller_manager_config.yaml": text}},
    )
    deployment = {
        "metadata": {"name": "kueue-controller-manager", "namespace": "kueue-system"},
        "spec": {
            "template": {
                "metadata": {"annotations": {}},
                "spec": {"containers": [{"image": "registry.k8s.io/kueue/kueue:v0.19.2"}]},
            }
        },
        "status": {"availableReplicas": 1},
    }
    put("deployments", "kueue-system", deployment)
    job = next(d for d in _nccl(spec) if d["kind"] == "Job")
    put("jobs", "training", job)

    kube_kueue.reconcile(c, put)  # Kueue runs; the ProvisioningRequest API is not served yet
    crd = yaml.safe_load(files["charts/provisioningrequest-crd.yaml"])
    c.crds["provisioningrequests"] = Crd.from_object(crd)
    kube_kueue.reconcile(c, put)
    check = c.objects[("admissionchecks", "", "fmctl-capacity")]
    assert "Active" not in {x["type"] for x in (check.get("status") or {}).get("conditions", [])}
    (wl,) = [o for (p, _, _), o in c.objects.items() if p == "workloads"]
    reserved = {x["type"]: x for x in wl["status"]["conditions"]}["QuotaReserved"]
    assert (reserved["status"], reserved["message"]) == (
        "False",
        "ClusterQueue training is inactive",
    )

    # fmctl's values annotate Kueue's pods: a new template, new pods, the API served now.
    deployment["spec"]["template"]["metadata"]["annotations"] = config["controllerManager"][
        "manager"
    ]["podAnnotations"]
    kube_kueue.reconcile(c, put)
    active = {x["type"]: x for x in check["status"]["conditions"]}["Active"]
    assert active["status"] == "True"
    reserved = {x["type"]: x for x in wl["status"]["conditions"]}["QuotaReserved"]
    assert reserved["status"] == "True"
    assert wl["status"]["admissionChecks"][0]["state"] == "Pending"
    kube_kueue.reconcile(c, put)  # its next pass asks for the nodes
    (request,) = [o for (p, _, _), o in c.objects.items() if p == "provisioningrequests"]
    assert request["spec"]["podSets"][0]["count"] == 2
    (template,) = [o for (p, _, _), o in c.objects.items() if p == "podtemplates"]
    assert template["template"]["spec"]["nodeSelector"]["fmctl.dev/pool"] == POOL


def test_a_pod_identity_role_trusts_only_its_own_pods() -> None:
    """The sandbox judges a Pod Identity trust as STS would: the session tags EKS Pod
    Identity adds must match the trust's conditions, and tagging needs sts:TagSession."""
    from fmctl_sandbox import iam_eval

    statement = {
        "Effect": "Allow",
        "Principal": {"Service": "pods.eks.amazonaws.com"},
        "Action": ["sts:AssumeRole", "sts:TagSession"],
        "Condition": {
            "StringEquals": {
                "aws:RequestTag/eks-cluster-name": NAME,
                "aws:RequestTag/kubernetes-namespace": "kube-system",
                "aws:RequestTag/kubernetes-service-account": "cluster-autoscaler",
            }
        },
    }
    own = {
        "eks-cluster-name": NAME,
        "kubernetes-namespace": "kube-system",
        "kubernetes-service-account": "cluster-autoscaler",
    }
    pods = "pods.eks.amazonaws.com"
    assert iam_eval.trusts(statement, pods, "123456789012", None, own)
    other = {**own, "kubernetes-service-account": "default"}
    assert not iam_eval.trusts(statement, pods, "123456789012", None, other)
    assert not iam_eval.trusts(
        statement, pods, "123456789012", None, {**own, "eks-cluster-name": "x"}
    )
    no_tagging = {**statement, "Action": "sts:AssumeRole"}
    assert not iam_eval.trusts(no_tagging, pods, "123456789012", None, own)


def test_up_killed_as_it_tags_the_group_converges(sandbox: Sandbox, tmp_path: Path) -> None:
    """Killed as it tags the pool's Auto Scaling group (the node group made, its tags maybe
    not), `up` again finds the group and puts exactly the tags that are missing."""
    spec = _spec(tmp_path)
    region = region_of(spec)
    proc = sandbox.spawn("up", "-f", str(spec), "--sandbox", "--yes")
    said = kill_after(proc, "tag(s) on Auto Scaling group", 1)
    assert proc.returncode != 0, "".join(said)
    try:
        again = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300)
        assert again.returncode == 0, again.stdout + again.stderr
        aws = sandbox.aws(region)
        group = aws.client("eks").describe_nodegroup(clusterName=NAME, nodegroupName=POOL)
        asg = group["nodegroup"]["resources"]["autoScalingGroups"][0]["name"]
        (found,) = aws.client("autoscaling").describe_auto_scaling_groups(
            AutoScalingGroupNames=[asg]
        )["AutoScalingGroups"]
        tags = {t["Key"]: t["Value"] for t in found["Tags"]}
        assert tags["fmctl.dev/autoscaler"] == NAME
        assert len([k for k in tags if k.startswith("k8s.io/cluster-autoscaler/")]) == 8
        plan = sandbox.fmctl("plan", "-f", str(spec), "--sandbox", "-o", "json")
        assert plan.returncode == 0, plan.stdout + plan.stderr
        (pool,) = [
            c for c in json.loads(plan.stdout)["changes"] if c["resource"] == f"nodegroup/{POOL}"
        ]
        assert pool["action"] == "unchanged", pool
    finally:
        down = sandbox.fmctl("down", NAME, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, NAME, region) == []


def test_without_kueue_pending_pods_bring_nodes(sandbox: Sandbox, tmp_path: Path) -> None:
    """No Kueue: a job whose pods fit no node (the pool idled to zero) makes the autoscaler
    add as many nodes as they need, and they run there."""
    spec = _spec(tmp_path)
    data = yaml.safe_load(spec.read_text())
    data["kubernetes"]["queueing"] = "none"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    region = region_of(spec)
    quick_torchrun(sandbox, tmp_path)
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        api = kube_client(sandbox, NAME, region)
        try:
            deployment = api.get("apps/v1", "Deployment", "cluster-autoscaler", "kube-system")
            command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
            assert "--enable-provisioning-requests=true" not in command
            # up ran the NCCL test (no queue to hold it); once it is done the nodes idle.
            until("the nodes to go", lambda: _desired(sandbox, region) == 0, 120)
            job = next(d for d in _nccl(spec) if d["kind"] == "Job")
            job["metadata"]["name"] = "nccl-again"
            job["spec"]["suspend"] = False
            api.apply(job)

            def ran() -> bool:
                found = api.get("batch/v1", "Job", "nccl-again", "training") or {}
                states = (found.get("status") or {}).get("conditions") or []
                return any(c["type"] == "Complete" and c["status"] == "True" for c in states)

            until("the job to run on nodes brought for it", ran, 120)
            assert _desired(sandbox, region) == 2
            assert "pending pod(s)" in _status(sandbox, region)
        finally:
            api.close()
    finally:
        sandbox.node_tools(None)
        down = sandbox.fmctl("down", NAME, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, NAME, region) == []


def test_a_node_with_a_startup_taint_is_capacity_about_to_come() -> None:
    """The sandbox's autoscaler reads a startup taint as the real one (its FAQ, "startup
    taints"): the node is unready to it and counted as coming, and as its group's template
    it offers what it will once the taint is lifted. Other taints stay; without the flag,
    fmctl's taint is an ordinary one."""
    from fmctl_sandbox.eks_autoscaler_view import read
    from fmctl_sandbox.kube_model import Cluster

    def deployment(*extra: str) -> dict[str, Any]:
        container = {
            "name": "cluster-autoscaler",
            "image": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.34.5",
            "command": ["./cluster-autoscaler", "--cloud-provider=aws", *extra],
        }
        return {
            "metadata": {"name": "cluster-autoscaler", "namespace": "kube-system"},
            "spec": {"template": {"spec": {"containers": [container]}}},
            "status": {"availableReplicas": 1},
        }

    def node(name: str, *keys: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "labels": {"eks.amazonaws.com/nodegroup": "gpu"}},
            "spec": {"taints": [{"key": k, "value": "true", "effect": "NoSchedule"} for k in keys]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }

    c = Cluster("demo")
    c.objects[("nodes", "", "a")] = node("a", "nvidia.com/gpu", "fmctl.dev/unverified")
    c.objects[("nodes", "", "b")] = node("b", "nvidia.com/gpu")
    c.objects[("nodes", "", "c")] = node(
        "c", "startup-taint.cluster-autoscaler.kubernetes.io/disk", "nvidia.com/gpu"
    )
    for flags, starting in (
        (("--startup-taint=fmctl.dev/unverified",), {"a", "c"}),
        ((), {"c"}),
    ):
        c.objects[("deployments", "kube-system", "cluster-autoscaler")] = deployment(*flags)
        view = read(c)
        assert view is not None
        nodes = {n.name: n for n in view.nodes}
        assert {n for n, x in nodes.items() if x.starting} == starting
        assert {n for n, x in nodes.items() if x.ready} == {"a", "b", "c"} - starting
        for name in starting:
            keys = [t["key"] for t in nodes[name].obj["spec"]["taints"]]
            assert keys == ["nvidia.com/gpu"]
    assert [t["key"] for t in nodes["a"].obj["spec"]["taints"]] == [
        "nvidia.com/gpu",
        "fmctl.dev/unverified",
    ]
