"""The sandbox's Kubernetes API, reached by fmctl's real client (``KubeClient``) over HTTPS
with an EKS token: the behaviour fmctl relies on, and that a stand-in must get right for
the end-to-end tests to mean anything (server-side apply and field ownership above all)."""

from __future__ import annotations

import base64
import json
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.drivers.eks_auth import token
from provisioner.drivers.kube import KubeClient, KubeError
from tests.engine.harness import Sandbox

REGION = "eu-west-1"


def _cluster(sandbox: Sandbox) -> dict[str, Any]:
    aws = sandbox.aws(REGION)
    ec2 = aws.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.9.{i * 16}.0/20", AvailabilityZone=az)[
            "Subnet"
        ]["SubnetId"]
        for i, az in enumerate(("eu-west-1a", "eu-west-1b"))
    ]
    eks = aws.client("eks")
    name = f"kube-{uuid.uuid4().hex[:6]}"
    eks.create_cluster(
        name=name,
        version="1.33",
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": subnets},
    )
    while (cluster := eks.describe_cluster(name=name)["cluster"])["status"] != "ACTIVE":
        time.sleep(0.05)
    return cluster


@pytest.fixture(scope="module")
def cluster(sandbox: Sandbox) -> dict[str, Any]:
    return _cluster(sandbox)


def _client(sandbox: Sandbox, cluster: dict[str, Any], manager: str = "fmctl") -> KubeClient:
    aws = sandbox.aws(REGION)
    return KubeClient.for_eks(
        cluster["endpoint"],
        cluster["certificateAuthority"]["data"],
        lambda: token(aws, cluster["name"]),
        manager,
    )


@pytest.fixture
def api(sandbox: Sandbox, cluster: dict[str, Any]) -> Iterator[KubeClient]:
    client = _client(sandbox, cluster)
    yield client
    client.close()


def _ns(api: KubeClient) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def _config_map(ns: str, data: dict[str, str], labels: dict[str, str] | None = None) -> Any:
    meta: dict[str, Any] = {"name": "settings", "namespace": ns}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def test_apply_creates_with_identity_and_ownership(api: KubeClient) -> None:
    ns = _ns(api)
    live = api.apply(_config_map(ns, {"a": "1"}))
    meta = live["metadata"]
    assert meta["uid"] and meta["resourceVersion"] and meta["namespace"] == ns
    fields = meta["managedFields"]
    assert [(f["manager"], f["operation"]) for f in fields] == [("fmctl", "Apply")]
    assert fields[0]["fieldsV1"] == {"f:data": {"f:a": {}}}
    # The same apply again changes nothing, not even the resource version.
    again = api.apply(_config_map(ns, {"a": "1"}))
    assert again["metadata"]["resourceVersion"] == meta["resourceVersion"]
    assert again["metadata"]["uid"] == meta["uid"]


def test_apply_merges_and_drops_what_the_manager_stopped_applying(
    sandbox: Sandbox, cluster: dict[str, Any], api: KubeClient
) -> None:
    ns = _ns(api)
    api.apply(_config_map(ns, {"a": "1", "b": "2"}))
    other = _client(sandbox, cluster, "kubectl-edit")
    try:
        other.apply(_config_map(ns, {"c": "3"}))
    finally:
        other.close()
    live = api.apply(_config_map(ns, {"a": "1"}))  # fmctl no longer applies b
    assert live["data"] == {"a": "1", "c": "3"}  # b removed, the other manager's c kept
    owners = {f["manager"]: f["fieldsV1"] for f in live["metadata"]["managedFields"]}
    assert owners == {"fmctl": {"f:data": {"f:a": {}}}, "kubectl-edit": {"f:data": {"f:c": {}}}}


def test_a_field_another_manager_owns_conflicts_unless_forced(
    sandbox: Sandbox, cluster: dict[str, Any], api: KubeClient
) -> None:
    ns = _ns(api)
    api.apply(_config_map(ns, {"a": "1"}))
    other = _client(sandbox, cluster, "someone")
    try:
        with pytest.raises(KubeError) as err:
            other.apply(_config_map(ns, {"a": "changed"}))
        assert err.value.status == 409 and 'conflict with "fmctl"' in err.value.message
        # The same value is shared ownership, not a conflict.
        other.apply(_config_map(ns, {"a": "1"}))
        forced = other.apply(_config_map(ns, {"a": "changed"}), force=True)
    finally:
        other.close()
    assert forced["data"] == {"a": "changed"}
    owners = {f["manager"] for f in forced["metadata"]["managedFields"]}
    assert owners == {"someone"}


def test_namespaces_scope_objects(api: KubeClient) -> None:
    with pytest.raises(KubeError) as err:
        api.apply(_config_map("no-such-namespace", {"a": "1"}))
    assert err.value.status == 404
    ns = _ns(api)
    api.apply(_config_map(ns, {"a": "1"}, {"team": "ml"}))
    assert [o["metadata"]["name"] for o in api.list("v1", "ConfigMap", ns, "team=ml")] == [
        "settings"
    ]
    assert api.list("v1", "ConfigMap", ns, "team=other") == []
    assert api.delete("v1", "Namespace", ns) is True
    assert api.get("v1", "ConfigMap", "settings", ns) is None
    assert api.delete("v1", "Namespace", ns) is False


def test_requests_without_an_eks_token_are_refused(
    sandbox: Sandbox, cluster: dict[str, Any]
) -> None:
    for bad in ("not-a-token", "k8s-aws-v1.aGVsbG8"):
        client = KubeClient.for_eks(
            cluster["endpoint"], cluster["certificateAuthority"]["data"], lambda b=bad: b
        )
        try:
            with pytest.raises(KubeError) as err:
                client.list("v1", "Namespace")
            assert err.value.status == 401
        finally:
            client.close()


def test_device_plugins_make_nodes_advertise_devices(
    sandbox: Sandbox, cluster: dict[str, Any], api: KubeClient
) -> None:
    """Nodes join bare; a device plugin DaemonSet that tolerates the GPU taint makes them
    advertise GPUs (the AL2023 NVIDIA AMI has no plugin of its own)."""
    aws = sandbox.aws(REGION)
    ec2, eks = aws.client("ec2"), aws.client("eks")
    lt = ec2.create_launch_template(
        LaunchTemplateName=f"lt-{cluster['name']}",
        LaunchTemplateData={
            "InstanceType": "p5.48xlarge",
            "NetworkInterfaces": [
                {"NetworkCardIndex": i, "DeviceIndex": min(i, 1), "InterfaceType": "efa-only"}
                for i in range(4)
            ],
        },
    )["LaunchTemplate"]
    eks.create_nodegroup(
        clusterName=cluster["name"],
        nodegroupName="gpu",
        nodeRole="arn:aws:iam::123456789012:role/node",
        subnets=cluster["resourcesVpcConfig"]["subnetIds"][:1],
        launchTemplate={"id": lt["LaunchTemplateId"]},
        scalingConfig={"minSize": 1, "maxSize": 1, "desiredSize": 1},
        labels={"pool": "gpu"},
        taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}],
    )
    while not api.list("v1", "Node", selector="pool=gpu"):
        time.sleep(0.05)
    node = api.list("v1", "Node", selector="pool=gpu")[0]
    assert "nvidia.com/gpu" not in node["status"]["allocatable"]
    ns = _ns(api)
    plugin = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "gpu-plugin", "namespace": ns},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "p", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"}
                    ]
                }
            }
        },
    }
    api.apply(plugin)  # no toleration: the tainted node does not run it
    ds = api.get("apps/v1", "DaemonSet", "gpu-plugin", ns)
    assert ds is not None and ds["status"]["desiredNumberScheduled"] == 0
    plugin["spec"]["template"]["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    api.apply(plugin)
    node = api.list("v1", "Node", selector="pool=gpu")[0]
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert "vpc.amazonaws.com/efa" not in node["status"]["allocatable"]  # no EFA plugin


def _raw(
    sandbox: Sandbox,
    cluster: dict[str, Any],
    method: str,
    path: str,
    body: Any = None,
    ctype: str = "application/json",
) -> tuple[int, Any]:
    """One request as kubectl makes it (its own content types), with the cluster's token."""
    import json
    import ssl
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"{cluster['endpoint']}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={
            "Authorization": f"Bearer {token(sandbox.aws(REGION), cluster['name'])}",
            "Content-Type": ctype,
        },
    )
    context = ssl.create_default_context(cafile=sandbox.info["ca"])
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_discovery_gives_kubectls_short_names(sandbox: Sandbox, cluster: dict[str, Any]) -> None:
    _, core = _raw(sandbox, cluster, "GET", "/api/v1")
    _, apps = _raw(sandbox, cluster, "GET", "/apis/apps/v1")
    short = {r["name"]: r.get("shortNames") for r in [*core["resources"], *apps["resources"]]}
    assert short["pods"] == ["po"] and short["services"] == ["svc"]
    assert short["deployments"] == ["deploy"] and short["daemonsets"] == ["ds"]
    assert short["secrets"] is None  # Kubernetes gives secrets none
    assert {r["singularName"] for r in core["resources"]} >= {"pod", "namespace"}


def _deployment(ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns, "labels": {"tier": "web", "old": "yes"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "nodeSelector": {"pool": "nowhere"},
                    "containers": [
                        {"name": "app", "image": "web:1", "env": [{"name": "A", "value": "1"}]},
                        {"name": "sidecar", "image": "side:1"},
                    ],
                },
            },
        },
    }


def test_create_merge_patch_and_strategic_merge_patch(
    sandbox: Sandbox, cluster: dict[str, Any], api: KubeClient
) -> None:
    ns = _ns(api)
    base = f"/apis/apps/v1/namespaces/{ns}/deployments"
    status, made = _raw(sandbox, cluster, "POST", base, _deployment(ns))
    assert status == 201 and made["metadata"]["uid"]
    status, again = _raw(sandbox, cluster, "POST", base, _deployment(ns))
    assert (status, again["reason"]) == (409, "AlreadyExists")

    merge = "application/merge-patch+json"
    status, patched = _raw(
        sandbox,
        cluster,
        "PATCH",
        f"{base}/web?fieldManager=kubectl-edit",
        {"metadata": {"labels": {"old": None}}, "spec": {"replicas": 3}},
        merge,
    )
    assert status == 200
    assert patched["spec"]["replicas"] == 3 and patched["metadata"]["labels"] == {"tier": "web"}
    assert patched["metadata"]["generation"] == 2
    # A merge patch replaces lists whole: only the container given is left.
    _, replaced = _raw(
        sandbox,
        cluster,
        "PATCH",
        f"{base}/web",
        {"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "web:2"}]}}}},
        merge,
    )
    assert [c["name"] for c in replaced["spec"]["template"]["spec"]["containers"]] == ["app"]
    # A resourceVersion in a patch is a precondition: a patch made from an object read
    # before the last change is refused (Conflict), one made from the current one is not.
    stale = patched["metadata"]["resourceVersion"]
    status, refused = _raw(
        sandbox,
        cluster,
        "PATCH",
        f"{base}/web",
        {"metadata": {"resourceVersion": stale}, "spec": {"replicas": 5}},
        merge,
    )
    assert (status, refused["reason"]) == (409, "Conflict")
    assert "the object has been modified" in refused["message"]
    current = replaced["metadata"]["resourceVersion"]
    status, taken = _raw(
        sandbox,
        cluster,
        "PATCH",
        f"{base}/web",
        {"metadata": {"resourceVersion": current}, "spec": {"replicas": 5}},
        merge,
    )
    assert status == 200 and taken["spec"]["replicas"] == 5
    assert taken["metadata"]["resourceVersion"] != current

    _raw(sandbox, cluster, "DELETE", f"{base}/web")
    _raw(sandbox, cluster, "POST", base, _deployment(ns))
    strategic = "application/strategic-merge-patch+json"
    status, patched = _raw(
        sandbox,
        cluster,
        "PATCH",
        f"{base}/web",
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "app", "env": [{"name": "B", "value": "2"}]},
                            {"name": "sidecar", "$patch": "delete"},
                        ]
                    }
                }
            }
        },
        strategic,
    )
    assert status == 200
    (app,) = patched["spec"]["template"]["spec"]["containers"]
    assert app["image"] == "web:1"  # merged by name, not replaced
    assert app["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    managers = {e["manager"]: e["operation"] for e in patched["metadata"]["managedFields"]}
    assert managers["kubectl-patch"] == "Update"

    # The patcher now owns what it changed: fmctl's apply of another value conflicts.
    with pytest.raises(KubeError) as err:
        api.apply(_deployment(ns))
    assert err.value.status == 409
    status, _ = _raw(sandbox, cluster, "PATCH", f"{base}/nothere", {"a": 1}, merge)
    assert status == 404
    status, _ = _raw(sandbox, cluster, "PATCH", f"{base}/web", {"a": 1}, "text/plain")
    assert status == 415


def test_workload_pods_follow_their_nodes(
    sandbox: Sandbox, cluster: dict[str, Any], api: KubeClient
) -> None:
    """DaemonSets and Deployments have pods; scaling a node group in drains a node: its
    DaemonSet pod goes, the Deployment's pods move to a node that remains."""
    eks = sandbox.aws(REGION).client("eks")
    eks.create_nodegroup(
        clusterName=cluster["name"],
        nodegroupName="cpu",
        nodeRole="arn:aws:iam::123456789012:role/node",
        subnets=cluster["resourcesVpcConfig"]["subnetIds"][:1],
        instanceTypes=["m7i.2xlarge"],
        scalingConfig={"minSize": 1, "maxSize": 2, "desiredSize": 2},
        labels={"pool": "cpu"},
    )
    while len(api.list("v1", "Node", selector="pool=cpu")) < 2:
        time.sleep(0.05)
    ns = _ns(api)
    select = {"nodeSelector": {"pool": "cpu"}}
    template = {
        "metadata": {"labels": {"app": "w"}},
        "spec": {**select, "containers": [{"name": "c", "image": "w:1"}]},
    }
    api.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "w"}},
                "template": template,
            },
        }
    )
    api.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": ns},
            "spec": {"selector": {"matchLabels": {"app": "w"}}, "template": template},
        }
    )

    def pods() -> dict[str, list[tuple[str, str]]]:
        out: dict[str, list[tuple[str, str]]] = {"ReplicaSet": [], "DaemonSet": []}
        for pod in api.list("v1", "Pod", ns):
            kind = pod["metadata"]["ownerReferences"][0]["kind"]
            out[kind].append((pod["spec"].get("nodeName", ""), pod["status"]["phase"]))
        return out

    nodes = {n["metadata"]["name"] for n in api.list("v1", "Node", selector="pool=cpu")}
    now = pods()
    assert sorted(n for n, _ in now["DaemonSet"]) == sorted(nodes)
    assert len(now["ReplicaSet"]) == 2 and {p for _, p in now["ReplicaSet"]} == {"Running"}
    eks.update_nodegroup_config(
        clusterName=cluster["name"],
        nodegroupName="cpu",
        scalingConfig={"minSize": 1, "maxSize": 2, "desiredSize": 1},
    )
    deadline = time.monotonic() + 30
    while len(api.list("v1", "Node", selector="pool=cpu")) != 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    (left,) = {n["metadata"]["name"] for n in api.list("v1", "Node", selector="pool=cpu")}
    now = pods()
    assert now["DaemonSet"] == [(left, "Running")]
    assert now["ReplicaSet"] == [(left, "Running"), (left, "Running")]


def test_a_kubeconfig_reaches_the_same_api(
    sandbox: Sandbox, cluster: dict[str, Any], tmp_path: Path
) -> None:
    """``from_kubeconfig`` (what the kind tests use) reads the file as the ``kubernetes``
    package does, then speaks through fmctl's own transport: a token user and CA data."""
    aws = sandbox.aws(REGION)
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": cluster["endpoint"],
                    "certificate-authority-data": cluster["certificateAuthority"]["data"],
                },
            }
        ],
        "users": [{"name": "u", "user": {"token": token(aws, cluster["name"])}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(kubeconfig))
    client = KubeClient.from_kubeconfig(str(path))
    try:
        names = {n["metadata"]["name"] for n in client.list("v1", "Namespace")}
        assert "kube-system" in names
    finally:
        client.close()


def test_a_server_the_ca_does_not_vouch_for_is_refused(
    sandbox: Sandbox, cluster: dict[str, Any]
) -> None:
    """The endpoint's certificate is verified against the cluster's CA: another CA fails
    before any request is made (urllib3's SSL error, a connection error to the caller)."""
    from urllib3.exceptions import HTTPError

    from fmctl_sandbox.tls import make_certificate

    other, _ = make_certificate(Path(tempfile.mkdtemp()))
    before = set(Path(tempfile.gettempdir()).glob("fmctl-ca-*"))
    client = KubeClient.for_eks(
        cluster["endpoint"],
        base64.b64encode(other.read_bytes()).decode(),
        lambda: token(sandbox.aws(REGION), cluster["name"]),
    )
    try:
        with pytest.raises(HTTPError):
            client.list("v1", "Namespace")
        # The CA is held in memory: nothing on disk for a killed run to leave behind.
        assert set(Path(tempfile.gettempdir()).glob("fmctl-ca-*")) <= before
    finally:
        client.close()


def test_a_lifted_startup_taint_stays_lifted_until_the_group_changes_it(
    sandbox: Sandbox, cluster: dict[str, Any], api: KubeClient
) -> None:
    """A node registers with its group's taints; one lifted from the node (a startup taint,
    as fmctl's verify controller lifts fmctl.dev/unverified) stays lifted through the group's
    other changes, and an update's taints are applied as the API sends them: added or
    removed (UpdateNodegroupConfig's addOrUpdateTaints and removeTaints)."""
    eks = sandbox.aws(REGION).client("eks")
    name = f"startup-{uuid.uuid4().hex[:4]}"
    eks.create_nodegroup(
        clusterName=cluster["name"],
        nodegroupName=name,
        nodeRole="arn:aws:iam::123456789012:role/node",
        subnets=cluster["resourcesVpcConfig"]["subnetIds"][:1],
        scalingConfig={"minSize": 1, "maxSize": 3, "desiredSize": 1},
        labels={"pool": name},
        taints=[
            {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"},
            {"key": "fmctl.dev/unverified", "value": "true", "effect": "NO_SCHEDULE"},
        ],
    )
    while not api.list("v1", "Node", selector=f"pool={name}"):
        time.sleep(0.05)
    (node,) = api.list("v1", "Node", selector=f"pool={name}")
    first = node["metadata"]["name"]
    keys = lambda n: sorted(t["key"] for t in n["spec"].get("taints") or [])  # noqa: E731
    assert keys(node) == ["fmctl.dev/unverified", "nvidia.com/gpu"]
    lifted = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    status, _ = _raw(
        sandbox,
        cluster,
        "PATCH",
        f"/api/v1/nodes/{first}",
        {"spec": {"taints": lifted}},
        "application/merge-patch+json",
    )
    assert status == 200

    def settled() -> dict[str, dict[str, Any]]:
        while (
            eks.describe_nodegroup(clusterName=cluster["name"], nodegroupName=name)["nodegroup"][
                "status"
            ]
            != "ACTIVE"
        ):
            time.sleep(0.05)
        return {n["metadata"]["name"]: n for n in api.list("v1", "Node", selector=f"pool={name}")}

    # A scaling change: the lifted taint stays lifted; a new node registers with it.
    eks.update_nodegroup_config(
        clusterName=cluster["name"],
        nodegroupName=name,
        scalingConfig={"minSize": 1, "maxSize": 3, "desiredSize": 2},
    )
    nodes = settled()
    while len(nodes) < 2:
        time.sleep(0.05)
        nodes = settled()
    assert keys(nodes[first]) == ["nvidia.com/gpu"]
    (second,) = set(nodes) - {first}
    assert keys(nodes[second]) == ["fmctl.dev/unverified", "nvidia.com/gpu"]
    # A taint update: what it adds reaches every node, what it removes leaves every node.
    eks.update_nodegroup_config(
        clusterName=cluster["name"],
        nodegroupName=name,
        taints={
            "addOrUpdateTaints": [{"key": "maintenance", "value": "x", "effect": "NO_SCHEDULE"}],
            "removeTaints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}],
        },
    )
    nodes = settled()
    assert keys(nodes[first]) == ["maintenance"]
    assert keys(nodes[second]) == ["fmctl.dev/unverified", "maintenance"]
    eks.delete_nodegroup(clusterName=cluster["name"], nodegroupName=name)


def test_the_sandbox_runs_fmctls_python_programs_only(
    sandbox: Sandbox, cluster: dict[str, Any], api: KubeClient, tmp_path: Path
) -> None:
    """A Deployment of fmctl's that runs python3 in a Python image runs as a process
    (kube_programs), given its API and a token; a user's Python Deployment only reports
    ready. Deleting the Deployment stops its program."""
    ns = _ns(api)
    code = (
        "import sys, pathlib, urllib.request, ssl; "
        "args = dict(a[2:].split('=', 1) for a in sys.argv[1:] if a.startswith('--')); "
        "token = pathlib.Path(args['account'], 'token').read_text(); "
        "ctx = ssl.create_default_context(cafile=str(pathlib.Path(args['account'], 'ca.crt'))); "
        "req = urllib.request.Request(args['server'] + '/api/v1/namespaces', "
        "headers={'Authorization': 'Bearer ' + token}); "
        "answer = urllib.request.urlopen(req, context=ctx).status; "
        f"pathlib.Path({str(tmp_path)!r}, 'ran-' + pathlib.Path.cwd().name)"
        ".write_text(str(answer)); "
        "import time; time.sleep(600)"
    )

    def deployment(name: str, labels: dict[str, str]) -> dict[str, Any]:
        meta = {"name": name, "namespace": ns, "labels": {"app": name, **labels}}
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name, **labels}},
                    "spec": {
                        "containers": [
                            {
                                "name": "main",
                                "image": "public.ecr.aws/docker/library/python:3.12-slim",
                                "command": ["python3", "-c", code],
                            }
                        ]
                    },
                },
            },
        }

    api.apply(deployment("users", {}))
    api.apply(deployment("ours", {"app.kubernetes.io/part-of": "fmctl"}))
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob("ran-*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1)
    ran = list(tmp_path.glob("ran-*"))
    # One program ran, fmctl's, and its token and the CA let it read the API (200).
    assert len(ran) == 1 and ran[0].read_text() == "200", ran
    assert api.delete("apps/v1", "Deployment", "ours", ns)
    api.apply(deployment("users", {"touched": "yes"}))  # a write: the sandbox looks again

    def running() -> list[str]:
        out = []
        for proc in Path("/proc").iterdir():
            try:
                line = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if ran[0].name.removeprefix("ran-") in line:
                out.append(line)
        return out

    deadline = time.monotonic() + 15
    while running() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running() == []
