"""`fmctl up --scheduler kubernetes` end to end in the sandbox: the real CLI against the
emulator (EKS shim, moto's EC2/IAM/KMS) and the in-memory Kubernetes API; the parameters
EKS and EC2 received, the order (add-ons after nodes), the readiness check, and `down`
clearing what controllers made before it takes the nodes."""

from __future__ import annotations

import base64
import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from provisioner.drivers.kube import KubeClient
from provisioner.resources.network import CNI_TAG, LB_TAG
from provisioner.resources.tags import OWNER_TAG
from tests.engine.harness import (
    Sandbox,
    fmctl_calls,
    kube_client,
    owned,
    raw_leftovers,
    region_of,
    spec_file,
)

B300_EXAMPLE = "p6-b300-eks-capacity-block.yaml"


def _template(sandbox: Sandbox, region: str, lt_id: str) -> dict[str, Any]:
    ec2 = sandbox.aws(region).client("ec2")
    data: dict[str, Any] = ec2.describe_launch_template_versions(LaunchTemplateId=lt_id)[
        "LaunchTemplateVersions"
    ][0]["LaunchTemplateData"]
    return data


def _events(sandbox: Sandbox, name: str) -> list[dict[str, Any]]:
    log = sandbox.home / "clusters" / name / "events.log"
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_every_gpu_type_gets_its_efa_layout_and_capacity(sandbox: Sandbox, tmp_path: Path) -> None:
    """p5.48xlarge: 32 EFA devices; p5en: 16; p6-b300: card 0 ENA only, 16 EFA on cards
    1-16, on a Capacity Block. One cluster with the three pools, checked in what EC2 and
    EKS received, then in what the nodes advertise."""
    name = "e2e-eks-types"
    base = yaml.safe_load((Path(__file__).parents[2] / "examples" / B300_EXAMPLE).read_text())
    pools = [
        base["compute"]["gpuPools"][0],
        {
            "name": "p5",
            "instanceType": "p5.48xlarge",
            "count": 1,
            "capacity": {"type": "on-demand"},
        },
        {
            "name": "p5en",
            "instanceType": "p5en.48xlarge",
            "count": 1,
            "capacity": {"type": "on-demand"},
        },
    ]
    spec = spec_file(tmp_path, name, example=B300_EXAMPLE, compute={"gpuPools": pools})
    region = region_of(spec)
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        ids = {logical: aws_id for _, logical, aws_id in owned(sandbox, name, region)}
        efa_group = ids["sg/efa"]
        # EFA devices, and whether card 0 has one (at device 1, beside the primary ENA).
        expected = {"b300": (16, False), "p5": (32, True), "p5en": (16, True)}
        for pool, (efa, card0_efa) in expected.items():
            lt = _template(sandbox, region, ids[f"launch-template/{pool}"])
            nics = lt["NetworkInterfaces"]
            primary = [n for n in nics if n["NetworkCardIndex"] == 0 and n["DeviceIndex"] == 0]
            assert [n["InterfaceType"] for n in primary] == ["interface"]
            efa_nics = [n for n in nics if n["InterfaceType"] in ("efa", "efa-only")]
            assert len(efa_nics) == efa, pool
            assert len({n["NetworkCardIndex"] for n in efa_nics}) == efa  # one per card
            on_card0 = [n for n in efa_nics if n["NetworkCardIndex"] == 0]
            assert [n["DeviceIndex"] for n in on_card0] == ([1] if card0_efa else []), pool
            assert all(n["Groups"] == [efa_group] and "SubnetId" not in n for n in nics)
            assert lt["MetadataOptions"]["HttpTokens"] == "required"
            assert lt["MetadataOptions"]["HttpPutResponseHopLimit"] == 2
            assert all(b["Ebs"]["Encrypted"] for b in lt["BlockDeviceMappings"])
            user_data = base64.b64decode(lt["UserData"]).decode()
            assert "kind: NodeConfig" in user_data and "vm.nr_hugepages" in user_data
        b300 = _template(sandbox, region, ids["launch-template/b300"])
        assert b300["InstanceMarketOptions"]["MarketType"] == "capacity-block"
        target = b300["CapacityReservationSpecification"]["CapacityReservationTarget"]
        assert (
            target["CapacityReservationId"]
            == base["compute"]["gpuPools"][0]["capacity"]["reservationId"]
        )
        eks = sandbox.aws(region).client("eks")
        groups = {
            g: eks.describe_nodegroup(clusterName=name, nodegroupName=g)["nodegroup"]
            for g in ("b300", "p5", "p5en", "system")
        }
        assert groups["b300"]["capacityType"] == "CAPACITY_BLOCK"
        assert groups["p5"]["capacityType"] == "ON_DEMAND"
        for pool in expected:
            ng = groups[pool]
            assert ng["amiType"] == "AL2023_x86_64_NVIDIA"
            assert ng["launchTemplate"]["id"] == ids[f"launch-template/{pool}"]
            # GPU work only, and (the verify gate, on by default) none before it passed.
            assert ng["taints"] == [
                {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"},
                {"key": "fmctl.dev/unverified", "value": "true", "effect": "NO_SCHEDULE"},
            ]
            assert ng["labels"]["fmctl.dev/pool"] == pool
            assert ng["subnets"] == [ids["subnet/private"]]
            # EKS node auto repair (spec health:, on by default), one node at a time.
            # The overrides make EKS follow fmctl's fault table (test_day2 checks them).
            assert ng["nodeRepairConfig"]["enabled"] is True
            assert ng["nodeRepairConfig"]["maxParallelNodesRepairedCount"] == 1
            actions = {
                o["nodeUnhealthyReason"]: o["repairAction"]
                for o in ng["nodeRepairConfig"]["nodeRepairConfigOverrides"]
            }
            assert actions["NvidiaXID13Error"] == "NoAction"
            assert actions["NvidiaXID64Error"] == "Replace"
        assert groups["system"]["amiType"] == "AL2023_x86_64_STANDARD"
        assert groups["system"]["nodeRepairConfig"] == {"enabled": False}
        # What the nodes advertise once the device plugins run, per pool.
        api = kube_client(sandbox, name, region)
        try:
            for pool, (efa, _) in expected.items():
                nodes = api.list("v1", "Node", selector=f"fmctl.dev/pool={pool}")
                assert [n["status"]["allocatable"]["vpc.amazonaws.com/efa"] for n in nodes] == [
                    str(efa)
                ] * len(nodes)
                assert {n["status"]["allocatable"]["nvidia.com/gpu"] for n in nodes} == {"8"}
        finally:
            api.close()
    finally:
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []


def test_eks_cluster_from_up_to_down(sandbox: Sandbox, tmp_path: Path) -> None:
    """The p5en example: control plane settings, add-ons after nodes, kubeconfig and
    `fmctl token`, the readiness check catching a node without EFA, and `down` deleting
    load balancers, dynamic volumes and CNI leftovers first, and nothing foreign."""
    name = "e2e-eks"
    spec = spec_file(
        tmp_path,
        name,
        kubernetes={"version": "1.33", "addonVersions": {"coredns": "v1.11.4-eksbuild.14"}},
    )
    region = region_of(spec)
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "gpu  8  efa 16" in up.stdout  # status view: nodes with their devices
    aws = sandbox.aws(region)
    eks = aws.client("eks")
    ids = {logical: aws_id for _, logical, aws_id in owned(sandbox, name, region)}

    cluster = eks.describe_cluster(name=name)["cluster"]
    assert cluster["version"] == "1.33"
    assert cluster["accessConfig"]["authenticationMode"] == "API"
    vpc = cluster["resourcesVpcConfig"]
    assert vpc["endpointPrivateAccess"] is True and vpc["endpointPublicAccess"] is True
    assert vpc["publicAccessCidrs"] == ["203.0.113.0/24"]  # the spec's apiCidrs, not the world
    key = cluster["encryptionConfig"][0]
    assert key["resources"] == ["secrets"]
    assert key["provider"]["keyArn"].endswith(ids["kms/secrets"])
    kms = aws.client("kms")
    assert kms.get_key_rotation_status(KeyId=ids["kms/secrets"])["KeyRotationEnabled"]
    assert {t for lg in cluster["logging"]["clusterLogging"] for t in lg["types"]} >= {
        "api",
        "audit",
        "authenticator",
    }
    entry = eks.describe_access_entry(clusterName=name, principalArn=ids["access/nodes"])
    assert entry["accessEntry"]["type"] == "EC2_LINUX"
    policies = eks.list_associated_access_policies(
        clusterName=name, principalArn=ids["access/admin"]
    )["associatedAccessPolicies"]
    assert [p["policyArn"].rsplit("/", 1)[1] for p in policies] == ["AmazonEKSClusterAdminPolicy"]

    # Add-ons only once the system nodes were ACTIVE; pinned versions kept, others default.
    events = _events(sandbox, name)
    nodes_ready = next(
        i
        for i, e in enumerate(events)
        if e["resource"] == "nodegroup/system" and e["state"] == "ready"
    )
    first_addon = next(
        i
        for i, e in enumerate(events)
        if e["resource"].startswith("addon/") and e["state"] == "creating"
    )
    assert first_addon > nodes_ready
    versions = {
        a: eks.describe_addon(clusterName=name, addonName=a)["addon"]["addonVersion"]
        for a in eks.list_addons(clusterName=name)["addons"]
    }
    assert versions["coredns"] == "v1.11.4-eksbuild.14"
    # Its node conditions drive node auto repair on the GPU node groups.
    assert "eks-node-monitoring-agent" in versions
    assert versions["vpc-cni"] == "v1.20.4-eksbuild.1"  # the shim's default for 1.33
    # The rendered NetworkPolicies bind: the VPC CNI runs its network policy agent.
    cni = eks.describe_addon(clusterName=name, addonName="vpc-cni")["addon"]
    assert json.loads(cni["configurationValues"]) == {"enableNetworkPolicy": "true"}
    fsx_csi = eks.describe_addon(clusterName=name, addonName="aws-fsx-csi-driver")["addon"]
    iam = aws.client("iam")
    role = iam.get_role(RoleName=ids["iam/fsx-csi"])["Role"]
    assert fsx_csi["podIdentityAssociations"] == [role["Arn"]]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "pods.eks.amazonaws.com"
    }
    assert iam.list_attached_role_policies(RoleName=ids["iam/fsx-csi"])["AttachedPolicies"] == []
    inline = iam.get_role_policy(RoleName=ids["iam/fsx-csi"], PolicyName="fmctl-fsx-csi")
    actions = {a for st in inline["PolicyDocument"]["Statement"] for a in st["Action"]}
    assert "fsx:CreateFileSystem" in actions and not any(a.endswith("*") for a in actions)

    # The control-plane logs go to a group fmctl made first: tagged, with a retention (EKS
    # would have made it untagged, keeping logs forever).
    logs = sandbox.aws(region).client("logs")
    (group,) = logs.describe_log_groups(logGroupNamePrefix=f"/aws/eks/{name}/")["logGroups"]
    assert group["logGroupName"] == f"/aws/eks/{name}/cluster"
    assert group["retentionInDays"] == 30
    group_tags = logs.list_tags_for_resource(resourceArn=group["logGroupArn"])["tags"]
    assert group_tags[OWNER_TAG] == name

    # The kubeconfig: mode 0600, an exec credential, and that credential works.
    kubeconfig = sandbox.home / "clusters" / name / "kubeconfig"
    assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
    config = yaml.safe_load(kubeconfig.read_text())
    exec_ = config["users"][0]["user"]["exec"]
    minted = subprocess.run(
        [exec_["command"], *exec_["args"]]
        if Path(exec_["command"]).exists()
        else [sys.executable, "-m", "provisioner", *exec_["args"]],
        capture_output=True,
        text=True,
        env=sandbox.env(),
        check=True,
        timeout=60,
    )
    credential = json.loads(minted.stdout)["status"]["token"]
    assert credential.startswith("k8s-aws-v1.") and credential not in kubeconfig.read_text()
    server = config["clusters"][0]["cluster"]
    api = KubeClient.for_eks(
        server["server"], server["certificate-authority-data"], lambda: credential
    )
    try:
        applied = api.list("apps/v1", "DaemonSet", selector="app.kubernetes.io/managed-by=fmctl")
        assert {d["metadata"]["name"] for d in applied} >= {
            "nvidia-device-plugin",
            "efa-device-plugin",
            "dcgm-exporter",
            "node-exporter",
        }
        # kube-state-metrics (nodes by condition, GPUs per node, pods by phase) runs, with
        # list/watch and nothing more.
        ksm = api.get("apps/v1", "Deployment", "kube-state-metrics", "monitoring")
        assert ksm is not None and ksm["status"]["readyReplicas"] == 1
        role = api.get("rbac.authorization.k8s.io/v1", "ClusterRole", "fmctl-kube-state-metrics")
        assert role is not None
        assert {v for rule in role["rules"] for v in rule["verbs"]} == {"list", "watch"}
        plugin = api.get("apps/v1", "DaemonSet", "efa-device-plugin", "fmctl-system")
        assert plugin is not None
        managers = {f["manager"] for f in plugin["metadata"]["managedFields"]}
        assert managers == {"fmctl"}
        assert plugin["metadata"]["labels"][OWNER_TAG] == name
        # Grafana's admin password is made in its pod, from the kernel's random source, into
        # a memory volume: no Secret, nothing of it in what fmctl sent or wrote down.
        assert api.get("v1", "Secret", "grafana-admin", "monitoring") is None
        grafana = api.get("apps/v1", "Deployment", "grafana", "monitoring")
        assert grafana is not None
        pod = grafana["spec"]["template"]["spec"]
        (init,) = pod["initContainers"]
        assert (
            "/dev/urandom" in init["command"][-1]
            and init["image"] == (pod["containers"][0]["image"])
        )
        (admin,) = [v for v in pod["volumes"] if v["name"] == "admin"]
        assert admin["emptyDir"]["medium"] == "Memory"
    finally:
        api.close()

    # Someone breaks the EFA device plugin: the next `up` says which nodes lost EFA.
    someone = kube_client(sandbox, name, region)
    try:
        someone.apply(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "efa-device-plugin", "namespace": "fmctl-system"},
                "spec": {"template": {"spec": {"nodeSelector": {"broken-by": "hand"}}}},
            }
        )
        again = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
        assert again.returncode == 1
        assert "advertises 0 vpc.amazonaws.com/efa, expected 16" in again.stderr
        assert "kubectl drain" in again.stderr
        # What controllers make and AWS bills: a load balancer, a dynamically provisioned
        # volume and its claim; and what the CNI and the LB controller left in the VPC.
        someone.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}})
        someone.apply(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": "apps"},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
            }
        )
        someone.apply(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {
                    "name": "pvc-123",
                    "annotations": {"pv.kubernetes.io/provisioned-by": "fsx.csi.aws.com"},
                },
                "spec": {
                    "persistentVolumeReclaimPolicy": "Delete",
                    "capacity": {"storage": "1200Gi"},
                },
            }
        )
        someone.apply(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "scratch", "namespace": "apps"},
                "spec": {"volumeName": "pvc-123"},
            }
        )
    finally:
        someone.close()
    ec2 = aws.client("ec2")
    cni_eni = ec2.create_network_interface(
        SubnetId=ids["subnet/private"],
        TagSpecifications=[
            {"ResourceType": "network-interface", "Tags": [{"Key": CNI_TAG, "Value": name}]}
        ],
    )["NetworkInterface"]["NetworkInterfaceId"]
    lb_group = ec2.create_security_group(
        GroupName="k8s-web",
        Description="lb",
        VpcId=ids["vpc"],
        TagSpecifications=[
            {"ResourceType": "security-group", "Tags": [{"Key": LB_TAG, "Value": name}]}
        ],
    )["GroupId"]
    other_vpc = ec2.create_vpc(CidrBlock="10.77.0.0/16")["Vpc"]["VpcId"]
    other_subnet = ec2.create_subnet(VpcId=other_vpc, CidrBlock="10.77.0.0/20")["Subnet"][
        "SubnetId"
    ]
    foreign_eni = ec2.create_network_interface(
        SubnetId=other_subnet,
        TagSpecifications=[
            {"ResourceType": "network-interface", "Tags": [{"Key": CNI_TAG, "Value": name}]}
        ],
    )["NetworkInterface"]["NetworkInterfaceId"]

    before = len(sandbox.requests())
    down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    log = [r["action"] for r in sandbox.requests()[before:]]
    deletes_lb = log.index("DELETE /api/v1/namespaces/apps/services/web")
    deletes_pvc = log.index("DELETE /api/v1/namespaces/apps/persistentvolumeclaims/scratch")
    first_nodegroup = log.index("DeleteNodegroup")
    assert max(deletes_lb, deletes_pvc) < first_nodegroup
    assert log.index("DeleteAddon") > first_nodegroup  # nodes go before the CNI
    assert log.index("DeleteCluster") > log.index("DeleteAccessEntry")
    assert log.index("DeleteNetworkInterface") > log.index("DeleteCluster")
    remaining = {
        e["NetworkInterfaceId"] for e in ec2.describe_network_interfaces()["NetworkInterfaces"]
    }
    assert cni_eni not in remaining and foreign_eni in remaining  # ours swept, theirs kept
    assert lb_group not in {g["GroupId"] for g in ec2.describe_security_groups()["SecurityGroups"]}
    assert raw_leftovers(sandbox, name, region) == []
    ec2.delete_network_interface(NetworkInterfaceId=foreign_eni)


def test_down_when_the_kubernetes_api_cannot_be_reached(sandbox: Sandbox, tmp_path: Path) -> None:
    """A private-only endpoint seen from outside its VPC: `down` stops before the node groups
    (a load balancer left behind costs more than a retry) and says what to do;
    `--skip-kubernetes-cleanup` goes on without the API and says what it did not delete."""
    name = "e2e-eks-unreachable"
    spec = spec_file(tmp_path, name)
    region = region_of(spec)
    assert sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes").returncode == 0
    sandbox.faults([{"action": "kubernetes", "kind": "reset"}])
    stopped = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    assert "cannot reach the Kubernetes API" in stopped.stderr
    assert "--skip-kubernetes-cleanup" in stopped.stderr and "Traceback" not in stopped.stderr
    left = {logical for _, logical, _ in owned(sandbox, name, region, unseen_ok=True)}
    assert {"eks", "nodegroup/system", "nodegroup/gpu", "addon/vpc-cni"} <= left

    before = len(sandbox.requests())
    skipped = sandbox.fmctl(
        "down", name, "--region", region, "--sandbox", "--yes", "--skip-kubernetes-cleanup"
    )
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert f"elbv2.k8s.aws/cluster={name}" in skipped.stdout
    # fmctl's own: the cluster's programs (its node agents) went on calling their API.
    assert not [r for r in fmctl_calls(sandbox.requests()[before:]) if r["service"] == "kubernetes"]
    assert raw_leftovers(sandbox, name, region) == []


AMP_WORKSPACE = (
    "arn:aws:aps:us-west-2:123456789012:workspace/ws-0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
)


def test_prometheus_remote_writes_to_amp_with_a_role_of_its_own(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """observability.ampWorkspaceArn: Prometheus's service account gets a Pod Identity role
    that may only write to that workspace, made before the stack; down removes both."""
    name = "e2e-eks-amp"
    spec = spec_file(tmp_path, name, observability={"ampWorkspaceArn": AMP_WORKSPACE})
    region = region_of(spec)
    before = len(sandbox.requests())
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    aws = sandbox.aws(region)
    eks = aws.client("eks")
    listed = eks.list_pod_identity_associations(clusterName=name)["associations"]
    # Prometheus's, beside the one fmctl's verify controller replaces faulty nodes as.
    assert sorted((a["namespace"], a["serviceAccount"]) for a in listed) == [
        ("fmctl-system", "fmctl-verify"),
        ("monitoring", "prometheus"),
    ]
    listed = [a for a in listed if a["namespace"] == "monitoring"]
    association = eks.describe_pod_identity_association(
        clusterName=name, associationId=listed[0]["associationId"]
    )["association"]
    assert association["tags"][OWNER_TAG] == name
    role = association["roleArn"].rsplit("/", 1)[1]
    iam = aws.client("iam")
    trust = iam.get_role(RoleName=role)["Role"]["AssumeRolePolicyDocument"]
    assert trust["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"] == []
    (policy,) = iam.list_role_policies(RoleName=role)["PolicyNames"]
    document = iam.get_role_policy(RoleName=role, PolicyName=policy)["PolicyDocument"]
    assert [(s["Action"], s["Resource"]) for s in document["Statement"]] == [
        (["aps:RemoteWrite"], AMP_WORKSPACE)
    ]
    # Made before Prometheus was applied, so it starts with credentials. (The upstream
    # charts, Kueue's, need no AWS credentials and may be applied before it.)
    log = sandbox.requests()[before:]
    made = next(i for i, r in enumerate(log) if r["action"] == "CreatePodIdentityAssociation")
    applied = [
        i
        for i, r in enumerate(log)
        if r["service"] == "kubernetes"
        and r["action"].startswith("PATCH")
        and "/namespaces/monitoring/" in r["action"]
    ]
    assert applied and made < min(applied)
    # Up again: nothing new, the association is found by its tags.
    again = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert again.returncode == 0 and " 0 created" in again.stdout, again.stdout
    down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []
