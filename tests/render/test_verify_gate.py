"""The EKS verify gate as rendered (health.verify.kubernetesGate): the startup taint on the
GPU node groups, the tolerations of what must run before the gate passes, the controller's
objects and each pool's Job, all through the official schemas; on by default, off when said.
The gate's own cases turn fmctl's node agent off (health.kubernetesAgent, on by default),
whose objects share the controller: its cases are at the end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from provisioner.drivers import yamlio
from tests.conftest import shared_file
from tests.render.helpers import documents, fill_all, rendered

ROOT = Path(__file__).resolve().parents[2]
TAINT = "fmctl.dev/unverified"


def _spec(tmp_path: Path, example: str, gate: bool | None, agent: bool | None = False) -> Path:
    data = yaml.safe_load((ROOT / "examples" / example).read_text())
    if gate is not None:
        data.setdefault("health", {}).setdefault("verify", {})["kubernetesGate"] = gate
    if agent is not None:
        data.setdefault("health", {})["kubernetesAgent"] = agent
    path = tmp_path / example
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _gated(tmp_path: Path, example: str = "p5en-eks-fsx-s3.yaml") -> dict[str, str]:
    """The gate alone (the agent off)."""
    return rendered(_spec(tmp_path, example, True), "kubernetes").files


def _controller_config(files: dict[str, str]) -> dict[str, Any]:
    """The controller's ConfigMap (its sources, the pools' templates, its settings)."""
    (config,) = [
        d
        for _, d in documents(files, "kubernetes/health-verify/")
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "fmctl-verify-controller"
    ]
    return config


def _tolerates(pod: dict[str, Any], key: str) -> bool:
    return any(t.get("key") == key for t in pod.get("tolerations") or [])


def test_off_when_said(tmp_path: Path) -> None:
    files = rendered(_spec(tmp_path, "p5en-eks-fsx-s3.yaml", False), "kubernetes").files
    assert not any(p.startswith("kubernetes/health-verify/") for p in files)
    assert TAINT not in files["aws/nodegroups/gpu.yaml"]
    assert "--startup-taint" not in "".join(files.values())


def test_by_default_the_agent_and_the_gate_run(tmp_path: Path) -> None:
    """The example as written: fmctl's node agent, the gate's scripts and the controller
    that runs both; new GPU nodes join tainted until they pass."""
    files = rendered(_spec(tmp_path, "p5en-eks-fsx-s3.yaml", None, None), "kubernetes").files
    kinds = {
        (d["kind"], d["metadata"]["name"])
        for _, d in documents(files, "kubernetes/health-verify/")
        if d["kind"] != "Kustomization"
    }
    assert ("DaemonSet", "fmctl-health-agent-gpu") in kinds
    assert ("Deployment", "fmctl-verify") in kinds
    assert ("ConfigMap", "fmctl-verify-scripts") in kinds
    assert TAINT in files["aws/nodegroups/gpu.yaml"]
    assert "fmctl.dev/verify-repair" in files["aws/autoscaling/gpu.yaml"]
    settings = json.loads(_controller_config(files)["data"]["_settings.json"])
    assert settings["agent"] is True and settings["replace"] is True


@pytest.mark.parametrize(
    "health",
    [{"kubernetesAgent": False, "verify": {"kubernetesGate": False}}, {"enabled": False}],
    ids=["agent-and-gate-false", "health-off"],
)
def test_the_agent_is_off_when_said_or_with_health(tmp_path: Path, health: dict[str, Any]) -> None:
    """`kubernetesAgent: false` and `kubernetesGate: false` leave the loop to AWS's agent
    and node auto repair; `health.enabled: false` turns both off with the rest of health."""
    data = yaml.safe_load((ROOT / "examples/p5en-eks-fsx-s3.yaml").read_text())
    data["health"] = health
    spec = tmp_path / "off.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    files = rendered(spec, "kubernetes").files
    assert not any(p.startswith("kubernetes/health-verify/") for p in files)
    assert not any(p.startswith("aws/autoscaling/") for p in files)
    items = _plan(spec)
    assert "iam/verify-repair" not in items and "pod-identity/verify-repair" not in items


def test_gpu_node_groups_join_tainted(tmp_path: Path) -> None:
    files = _gated(tmp_path)
    group = yaml.safe_load(files["aws/nodegroups/gpu.yaml"])
    assert {"key": TAINT, "value": "true", "effect": "NO_SCHEDULE"} in group["taints"]
    system = yaml.safe_load(files["aws/nodegroups/system.yaml"])
    assert TAINT not in json.dumps(system)  # the controller runs there
    eksctl = yamlio.load(fill_all(files["aws/eksctl-cluster.yaml"], ["gpu"]))
    jsonschema.validate(
        eksctl, json.loads(shared_file("schemas/eksctl-v1alpha5.schema.json").read_text())
    )
    (gpu,) = [g for g in eksctl["managedNodeGroups"] if g["name"] == "gpu"]
    assert {"key": TAINT, "value": "true", "effect": "NoSchedule"} in gpu["taints"]


def test_everything_the_gate_needs_tolerates_the_taint(tmp_path: Path) -> None:
    """The device plugins (the gate's Job asks for the devices they advertise) and the node
    agents run on an unverified node; the training work does not."""
    files = _gated(tmp_path)
    templates = {
        doc["metadata"]["name"]: doc["spec"]["template"]["spec"]
        for _, doc in documents(files, "kubernetes/")
        if doc["kind"] in ("DaemonSet", "Job")
    }
    for agent in ("nvidia-device-plugin", "efa-device-plugin", "dcgm-exporter"):
        assert _tolerates(templates[agent], TAINT), agent
    assert not _tolerates(templates["nccl-allreduce"], TAINT)


def test_the_controller_and_its_jobs_pass_the_official_schemas(tmp_path: Path) -> None:
    files = _gated(tmp_path)
    docs = [doc for _, doc in documents(files, "kubernetes/health-verify/")]
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "ConfigMap",
        "Deployment",
        "Kustomization",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ]
    for doc in docs:
        if doc["kind"] != "Kustomization":
            kubernetes_validate.validate(doc, "1.33.0", strict=True)
    docs = [d for d in docs if d["kind"] != "Kustomization"]
    (code,) = [d for d in docs if d["metadata"]["name"] == "fmctl-verify-controller"]
    job = json.loads(code["data"]["gpu.json"])
    kubernetes_validate.validate(job, "1.33.0", strict=True)
    # The shipped controller, byte for byte, and the stand-ins it replaces.
    source = ROOT / "templates/kubernetes/health-verify/verify_controller.py"
    assert code["data"]["verify_controller.py"] == source.read_text()
    assert job["metadata"]["name"] == "fmctl-job-name-standin"
    # The controller's Jobs are not `up`'s to list or prune (kube_stack reads the objects
    # labelled as the cluster's as what it applied): they carry no cluster label.
    assert "fmctl.dev/cluster" not in job["metadata"]["labels"]
    assert job["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "fmctl-verify"
    pod = job["spec"]["template"]["spec"]
    affinity = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert affinity["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [
        "fmctl-node-name-standin"
    ]
    assert _tolerates(pod, TAINT)
    # Every GPU and EFA device of a p5en node: the Job runs where nothing else holds them.
    gpu, efa = pod["containers"]
    assert gpu["resources"]["requests"]["nvidia.com/gpu"] == 8
    assert efa["resources"]["requests"]["vpc.amazonaws.com/efa"] == 16
    env = {e["name"]: e.get("value") for e in gpu["env"]}
    assert env["FMCTL_VERIFY_SCHEDULER"] == "kubernetes"
    assert env["FMCTL_HEALTH_VERIFY_DCGM_LEVEL"] == "2"
    (scripts,) = [d for d in docs if d["metadata"]["name"] == "fmctl-verify-scripts"]
    assert set(scripts["data"]) == {
        "verify-node.sh",
        "nvlinks.sh",
        "row-remap.sh",
        "efa-devices.sh",
    }


def test_the_controller_may_touch_nodes_and_its_own_jobs_only(tmp_path: Path) -> None:
    docs = {
        (d["kind"], d["metadata"]["name"]): d
        for _, d in documents(_gated(tmp_path), "kubernetes/health-verify/")
        if d["kind"] != "Kustomization"
    }
    cluster = docs[("ClusterRole", "fmctl-verify")]["rules"]
    # Pods cluster-wide, read only: which nodes' GPUs are in use (a pair's peer is idle).
    assert cluster == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    ]
    role = docs[("Role", "fmctl-verify")]
    assert role["metadata"]["namespace"] == "fmctl-system"
    verbs: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for r in rule["resources"]:
            for name in rule.get("resourceNames") or ["*"]:
                verbs.setdefault((r, name), set()).update(rule["verbs"])
    assert verbs == {
        ("jobs", "*"): {"get", "list", "create", "delete"},
        ("configmaps", "*"): {"create", "delete"},  # a pair's script and
        ("services", "*"): {"create", "delete"},  # the headless Service its ranks meet through
        # its repair counts, kept across its restarts: that one ConfigMap only
        ("configmaps", "fmctl-verify-repairs"): {"get", "patch"},
        ("pods", "*"): {"list"},
        ("pods/log", "*"): {"get"},
    }
    deployment = docs[("Deployment", "fmctl-verify")]["spec"]["template"]["spec"]
    assert deployment["nodeSelector"] == {"fmctl.dev/role": "system"}
    assert deployment["securityContext"]["runAsNonRoot"] is True
    (container,) = deployment["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["image"].startswith("public.ecr.aws/docker/library/python:")


def test_the_autoscaler_waits_for_a_node_being_verified(tmp_path: Path) -> None:
    """An autoscaled pool: the Cluster Autoscaler counts a tainted new node as one about to
    be ready (its --startup-taint), not as a node that cannot take the pods."""
    data = yaml.safe_load((ROOT / "examples/p5en-eks-fsx-s3.yaml").read_text())
    data.setdefault("health", {}).setdefault("verify", {})["kubernetesGate"] = True
    data["cost"] = {"idle": {"after": "1h", "action": "scale-down"}}
    data["compute"]["gpuPools"][0]["capacity"] = {"type": "on-demand"}
    path = tmp_path / "autoscaled.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    files = rendered(path, "kubernetes").files
    (deployment,) = [
        d
        for _, d in documents(files, "kubernetes/cluster-autoscaler/")
        if d["kind"] == "Deployment"
    ]
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert f"--startup-taint={TAINT}" in command
    # An empty group's node template is what a verified node offers: no startup taint.
    assert TAINT not in files["aws/autoscaling/gpu.yaml"]


def _plan(spec: Path) -> dict[str, Any]:
    from provisioner.blueprint import build
    from provisioner.catalog import load_catalog
    from tests.conftest import validate_text
    from tests.render.test_autoscaler import WHERE

    validation = validate_text(spec.read_text())
    assert validation.ok and validation.resolved is not None, validation.problems
    return {i.id: i for i in build(validation.resolved, load_catalog(), WHERE)}


def test_a_node_that_fails_is_replaced_by_a_role_for_the_gates_groups_only(
    tmp_path: Path,
) -> None:
    """health.repair: replace (the default): the controller gets the pool's repair budget,
    a role its pod assumes (EKS Pod Identity, its own service account in this cluster
    only) that may terminate instances only in the Auto Scaling groups fmctl tagged for the
    gate, and the GPU pools' groups carry that tag."""
    spec = _spec(tmp_path, "p5en-eks-fsx-s3.yaml", True)
    files = rendered(spec, "kubernetes").files
    name = yaml.safe_load(spec.read_text())["metadata"]["name"]
    config = _controller_config(files)
    settings = json.loads(config["data"]["_settings.json"])
    pools = yaml.safe_load(spec.read_text())["compute"]["gpuPools"]
    assert settings["replace"] is True
    # health.maxInRepair: 10% of the pool, at least one node.
    assert settings["budgets"] == {p["name"]: max(1, p["count"] // 10) for p in pools}
    aws_call = ROOT / "templates/kubernetes/health-verify/aws_call.py"
    assert config["data"]["aws_call.py"] == aws_call.read_text()
    (deployment,) = [
        d for _, d in documents(files, "kubernetes/health-verify/") if d["kind"] == "Deployment"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    mounts = {m["mountPath"]: m.get("subPath") for m in container["volumeMounts"]}
    assert mounts["/opt/fmctl/aws_call.py"] == "aws_call.py"
    assert "--settings=/opt/fmctl/_settings.json" in container["command"]
    assert {
        "name": "AWS_REGION",
        "value": yaml.safe_load(spec.read_text())["metadata"]["region"],
    } in container["env"]
    for pool in pools:
        tags = yaml.safe_load(files[f"aws/autoscaling/{pool['name']}.yaml"])["tags"]
        assert tags == {"fmctl.dev/verify-repair": name}  # the autoscaler's only when it sizes

    items = _plan(spec)
    role = items["iam/verify-repair"].params
    trust = json.loads(role.trust)["Statement"][0]
    assert trust["Principal"]["Service"] == "pods.eks.amazonaws.com"
    assert trust["Condition"]["StringEquals"] == {
        "aws:RequestTag/eks-cluster-name": name,
        "aws:RequestTag/kubernetes-namespace": "fmctl-system",
        "aws:RequestTag/kubernetes-service-account": "fmctl-verify",
    }
    (statement,) = json.loads(role.inline)["Statement"]
    assert statement["Action"] == ["autoscaling:TerminateInstanceInAutoScalingGroup"]
    assert statement["Condition"] == {
        "StringEquals": {"autoscaling:ResourceTag/fmctl.dev/verify-repair": name}
    }
    identity = items["pod-identity/verify-repair"].params
    assert (identity.namespace, identity.service_account) == ("fmctl-system", "fmctl-verify")
    group = items["nodegroup/gpu"].params
    assert dict(group.asg_tags) == {"fmctl.dev/verify-repair": name}
    assert not group.autoscaled  # a tag of the gate's does not hand the size to an autoscaler


def test_with_repair_reboot_the_gate_only_holds(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "examples/p5en-eks-fsx-s3.yaml").read_text())
    data["health"] = {
        "repair": "reboot",
        "verify": {"kubernetesGate": True},
        "kubernetesAgent": False,
    }
    spec = tmp_path / "reboot.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    files = rendered(spec, "kubernetes").files
    config = _controller_config(files)
    assert json.loads(config["data"]["_settings.json"])["replace"] is False
    assert not any(p.startswith("aws/autoscaling/") for p in files)
    items = _plan(spec)
    assert "iam/verify-repair" not in items and "pod-identity/verify-repair" not in items


def test_a_pools_pair_is_fmctl_checks_all_reduce_on_the_node_and_its_peer(
    tmp_path: Path,
) -> None:
    """health.verify.ncclPair (on by default) on a pool of two nodes or more on EFA: the
    controller gets the pool's floor and `fmctl check`'s all-reduce on two named nodes, in
    fmctl-system, tolerating the startup taint, not labelled as the cluster's."""
    files = _gated(tmp_path)
    config = _controller_config(files)
    floors = json.loads(config["data"]["_settings.json"])["pairs"]
    # p5en: no published 2-node figure; 70% of EFA's 400 GB/s at 4 GiB (verify-pair.sh's).
    assert floors == {
        "gpu": {
            "gbps": 280.0,
            "bytes": 4294967296,
            "why": "70% of EFA's 400 GB/s (a line-rate estimate)",
        }
    }
    docs = json.loads(config["data"]["gpu.pair.json"])
    assert [d["kind"] for d in docs] == ["ConfigMap", "Service", "Job"]
    for doc in docs:
        kubernetes_validate.validate(doc, "1.33.0", strict=True)
        labels = doc["metadata"]["labels"]
        assert "fmctl.dev/cluster" not in labels
        assert labels["app.kubernetes.io/name"] == "fmctl-verify-pair"
        assert doc["metadata"]["namespace"] == "fmctl-system"
    job = docs[-1]
    pod = job["spec"]["template"]["spec"]
    affinity = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert affinity["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [
        "fmctl-node-name-standin",
        "fmctl-peer-name-standin",
    ]
    assert _tolerates(pod, TAINT) and job["spec"]["completions"] == 2
    assert job["spec"]["suspend"] is False
    assert job["metadata"]["annotations"] == {"fmctl.dev/node": "fmctl-node-name-standin"}
    # Mounted where the controller reads its templates.
    (deployment,) = [
        d for _, d in documents(files, "kubernetes/health-verify/") if d["kind"] == "Deployment"
    ]
    (jobs,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "jobs"]
    assert {"key": "gpu.pair.json", "path": "gpu.pair.json"} in jobs["configMap"]["items"]

    # Off (ncclPair: false), or a pool of one node: no pair, no floor, no pods rule.
    data = yaml.safe_load((ROOT / "examples/p5en-eks-fsx-s3.yaml").read_text())
    data["health"] = {"verify": {"kubernetesGate": True, "ncclPair": False}}
    spec = tmp_path / "nopair.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    files = rendered(spec, "kubernetes").files
    config = _controller_config(files)
    assert json.loads(config["data"]["_settings.json"])["pairs"] == {}
    assert "gpu.pair.json" not in config["data"]


def _with_agent(tmp_path: Path, example: str = "p5en-eks-fsx-s3.yaml") -> Path:
    """The agent alone (the gate off)."""
    data = yaml.safe_load((ROOT / "examples" / example).read_text())
    data.setdefault("health", {})["kubernetesAgent"] = True
    data["health"].setdefault("verify", {})["kubernetesGate"] = False
    path = tmp_path / f"agent-{example}"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_node_agent_is_a_daemonset_per_pool_that_may_only_report(tmp_path: Path) -> None:
    """health.kubernetesAgent: a DaemonSet per GPU pool (its GPU and EFA counts), the
    shipped agent and the Slurm agent's looks in its ConfigMap, RBAC to patch nodes' status
    and nothing else; the controller without the gate's Jobs, replacing through its role;
    every object passes the official schemas."""
    spec = _with_agent(tmp_path)
    files = rendered(spec, "kubernetes").files
    docs = [
        d for _, d in documents(files, "kubernetes/health-verify/") if d["kind"] != "Kustomization"
    ]
    for doc in docs:
        kubernetes_validate.validate(doc, "1.33.0", strict=True)
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    pools = yaml.safe_load(spec.read_text())["compute"]["gpuPools"]
    code = by[("ConfigMap", "fmctl-health-agent")]["data"]
    for name, where in (
        ("node_agent.py", "templates/kubernetes/health-verify"),
        ("kube_call.py", "templates/kubernetes/health-verify"),
        ("health-detect.sh", "slurm/lib"),
        ("faults.tsv", "slurm/lib"),
        ("dcgm-watch.sh", "slurm/lib"),
    ):
        assert code[name] == (ROOT / where / name).read_text()
    for pool in pools:
        ds = by[("DaemonSet", f"fmctl-health-agent-{pool['name']}")]
        pod = ds["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"fmctl.dev/pool": pool["name"]}
        assert _tolerates(pod, "fmctl.dev/unhealthy") and _tolerates(pod, TAINT)
        container, dcgm = pod["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["FMCTL_EXPECTED_GPUS"] == "8" and env["FMCTL_EFA_ENABLED"] == "true"
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
        for one in (container, dcgm):  # every GPU seen, none held
            assert "nvidia.com/gpu" not in str(one.get("resources"))
        # DCGM's watches from DCGM's own image, written where the agent reads them, in the
        # pod's own scratch space.
        assert dcgm["image"].startswith("nvcr.io/nvidia/cloud-native/dcgm:")
        assert dcgm["command"][:2] == ["bash", "/opt/fmctl/lib/dcgm-watch.sh"]
        assert dcgm["command"][2] == env["FMCTL_DCGM_REPORT"]
        assert dcgm["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert dcgm["securityContext"]["readOnlyRootFilesystem"] is True
        assert {v["name"]: v for v in pod["volumes"]}["dcgm"]["emptyDir"]
        hosts = {v["name"]: v.get("hostPath") for v in pod["volumes"]}
        assert hosts["kmsg"] == {"path": "/dev/kmsg", "type": "CharDevice"}
    role = by[("ClusterRole", "fmctl-health-agent")]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}]
    # The controller: no gate's Jobs, its evictions, and the role that replaces.
    rules = by[("ClusterRole", "fmctl-verify")]["rules"]
    assert {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]} in rules
    assert not any("jobs" in r["resources"] for r in by[("Role", "fmctl-verify")]["rules"])
    settings = json.loads(_controller_config(files)["data"]["_settings.json"])
    assert settings["agent"] is True and settings["replace"] is False
    assert not any(
        k.endswith(".json") and k != "_settings.json" for k in _controller_config(files)["data"]
    )
    assert "iam/verify-repair" in _plan(spec)
    # The node groups do not join tainted (no gate).
    assert TAINT not in files["aws/nodegroups/gpu.yaml"]
    # Its series reach Prometheus through the node exporter's textfile collector, which
    # reads the folder the agent writes on the node.
    (exporter,) = [
        d for _, d in documents(files, "kubernetes/node-exporter/") if d["kind"] == "DaemonSet"
    ]
    pod = exporter["spec"]["template"]["spec"]
    assert "--collector.textfile.directory=/fmctl-metrics" in pod["containers"][0]["args"]
    hosts = {v["name"]: v.get("hostPath", {}).get("path") for v in pod["volumes"]}
    assert hosts["fmctl-metrics"] == "/var/lib/fmctl/metrics"
    agent_pod = by[("DaemonSet", f"fmctl-health-agent-{pools[0]['name']}")]["spec"]["template"]
    assert "--metrics=/var/lib/fmctl/metrics" in agent_pod["spec"]["containers"][0]["command"]
    assert {v["name"]: v.get("hostPath", {}).get("path") for v in agent_pod["spec"]["volumes"]}[
        "metrics"
    ] == "/var/lib/fmctl/metrics"


def test_a_gpu_node_has_one_dcgm_host_engine_that_every_client_names(tmp_path: Path) -> None:
    """NVIDIA supports one DCGM host engine a node (NVIDIA/DCGM#108; dcgm-exporter#61): the
    dcgm DaemonSet's is the only process that starts one, on nv-hostengine's own address
    (no option: 127.0.0.1:5555); the exporter, the agent's watches and the gate's diagnostic
    name it (an exporter or dcgmi without a host starts an engine of its own) and share the
    node's network, where it listens. Nothing gets SYS_ADMIN but the engine."""
    files = rendered(_spec(tmp_path, "p5en-eks-fsx-s3.yaml", True, True), "kubernetes").files
    (code,) = [
        d
        for _, d in documents(files, "kubernetes/health-verify/")
        if d.get("metadata", {}).get("name") == "fmctl-verify-controller"
    ]
    pods = {
        (doc["kind"], doc["metadata"]["name"]): doc["spec"]["template"]["spec"]
        for _, doc in documents(files, "kubernetes/")
        if doc["kind"] in ("DaemonSet", "Deployment", "Job")
    }
    pods[("Job", "gate")] = json.loads(code["data"]["gpu.json"])["spec"]["template"]["spec"]
    engines = [
        key
        for key, pod in pods.items()
        for c in pod["containers"]
        if "nv-hostengine" in " ".join(c.get("command") or [])
    ]
    assert engines == [("DaemonSet", "dcgm-hostengine")]
    engine = pods[("DaemonSet", "dcgm-hostengine")]
    (container,) = engine["containers"]
    assert container["command"] == ["nv-hostengine", "-n"] and engine["hostNetwork"] is True
    assert _tolerates(engine, TAINT)
    added = {
        key
        for key, pod in pods.items()
        for c in pod["containers"]
        if "SYS_ADMIN" in str((c.get("securityContext") or {}).get("capabilities"))
    }
    assert added == {("DaemonSet", "dcgm-hostengine")}

    exporter = pods[("DaemonSet", "dcgm-exporter")]
    env = {e["name"]: e.get("value") for e in exporter["containers"][0]["env"]}
    assert env["DCGM_REMOTE_HOSTENGINE_INFO"] == "127.0.0.1:5555"
    assert exporter["hostNetwork"] is True
    agent = pods[("DaemonSet", "fmctl-health-agent-gpu")]
    (watch,) = [c for c in agent["containers"] if c["name"] == "dcgm"]
    assert agent["hostNetwork"] is True and watch["command"][-1] == "127.0.0.1"
    gate = pods[("Job", "gate")]
    (gpu,) = [c for c in gate["containers"] if c["name"] == "gpu"]
    assert {e["name"]: e.get("value") for e in gpu["env"]}["FMCTL_DCGM_HOST"] == "127.0.0.1"
    assert gate["hostNetwork"] is True
