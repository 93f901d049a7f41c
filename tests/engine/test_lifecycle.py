"""up, up again, status, down, gc, reuse of an existing VPC, and two concurrent ups: the real
`fmctl` against the emulator over HTTPS, no mocks in the process under test."""

from __future__ import annotations

import calendar
import json
import stat
import time
from pathlib import Path

import pytest
import yaml

from provisioner.resources.tags import CREATED_TAG, EXPIRES_TAG, OWNER_TAG
from tests.engine.harness import (
    ROOT,
    Sandbox,
    created_calls,
    duplicates,
    fmctl_calls,
    owned,
    raw_leftovers,
    region_of,
    spec_file,
)

#: What the p5en Kubernetes example owns: network, groups, placement group, bucket, FSx,
#: the roles, the secrets key, the control-plane log group, the EKS cluster, its access
#: entries, launch template, node groups and add-ons, Kueue's chart (two GPU nodes: queued
#: by default), the in-cluster stack and the role fmctl's node agent's controller replaces a
#: faulty node as (health.kubernetesAgent, on by default).
P5EN_EKS = {
    "kms/secrets",
    "log-group/control-plane",
    "eks",
    "access/admin",
    "access/nodes",
    "launch-template/gpu",
    "nodegroup/system",
    "nodegroup/gpu",
    "addon/vpc-cni",
    "addon/kube-proxy",
    "addon/coredns",
    "addon/eks-pod-identity-agent",
    "addon/aws-fsx-csi-driver",
    "addon/eks-node-monitoring-agent",
    "iam/fsx-csi",
    "iam/verify-repair",
    "pod-identity/verify-repair",
    "chart/kueue",
    "kube-stack",
}
P5EN_RESOURCES = P5EN_EKS | {
    "bucket",
    "iam/eks-cluster",
    "iam/eks-node",
    "dra/s3",
    "dra/s3-export",
    "eip/nat",
    "fsx",
    "igw",
    "natgw",
    "placement-group/gpu",
    "route-table/private",
    "route-table/public",
    "s3-endpoint",
    "sg/efa",
    "sg/fsx",
    "subnet/private",
    "subnet/public",
    "subnet/secondary",
    "vpc",
}


def test_up_again_status_down(sandbox: Sandbox, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "e2e-lifecycle")
    region = region_of(spec)
    first = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "38 created, 0 existed" in first.stdout
    items = owned(sandbox, "e2e-lifecycle", region)
    assert {logical for _, logical, _ in items} == P5EN_RESOURCES
    assert duplicates(items) == {}

    before = len(sandbox.requests())
    again = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert again.returncode == 0, again.stderr
    assert "0 created, 38 existed" in again.stdout
    assert created_calls(sandbox.requests()[before:]) == []
    assert owned(sandbox, "e2e-lifecycle", region) == items

    iam = sandbox.aws(region).client("iam")
    node_role = f"fmctl-e2e-lifecycle-{region}-eks-node"
    attached = {
        p["PolicyName"]
        for p in iam.list_attached_role_policies(RoleName=node_role)["AttachedPolicies"]
    }
    assert attached == {
        "AmazonEKSWorkerNodePolicy",
        "AmazonEKS_CNI_Policy",
        "AmazonEC2ContainerRegistryReadOnly",
        "AmazonSSMManagedInstanceCore",
    }
    assert iam.list_role_policies(RoleName=node_role)["PolicyNames"] == []  # no inline "*"
    trust = iam.get_role(RoleName=node_role)["Role"]["AssumeRolePolicyDocument"]
    assert trust["Statement"] == [
        {
            "Effect": "Allow",
            "Action": "sts:AssumeRole",
            "Principal": {"Service": "ec2.amazonaws.com"},
        }
    ]
    profile = iam.get_instance_profile(InstanceProfileName=node_role)["InstanceProfile"]
    assert [r["RoleName"] for r in profile["Roles"]] == [node_role]

    status = sandbox.fmctl("status", "e2e-lifecycle", "--region", region, "--sandbox", "-o", "json")
    assert status.returncode == 0
    seen = json.loads(status.stdout)
    assert {r["resource"] for r in seen["resources"]} == P5EN_RESOURCES
    # Everything the text shows: EKS, add-ons, each pool's nodes with what they advertise,
    # the stack's health, how to reach it.
    kube = seen["kubernetes"]
    assert kube["status"] == "ACTIVE" and kube["healthy"] is True
    assert {a["name"] for a in kube["addons"]} >= {"vpc-cni", "coredns", "kube-proxy"}
    (gpu,) = [p for p in kube["pools"] if p["pool"] == "gpu"]
    assert len(gpu["nodes"]) == 8
    assert {(n["ready"], n["gpus"], n["efa"]) for n in gpu["nodes"]} == {(True, 8, 16)}
    assert any(r["name"] == "efa-device-plugin" and r["ready"] >= 1 for r in kube["stack"])
    assert any(line.startswith("kubectl:") for line in seen["access"]) and seen["slurm"] is None

    # On EKS the nodes carry their place as labels: no head node, nothing published.
    topo = sandbox.fmctl("topology", "e2e-lifecycle", "--region", region, "--sandbox")
    assert topo.returncode == 0, topo.stdout + topo.stderr
    assert "is an EKS cluster" in topo.stdout and "topology.k8s.aws/network-node-layer-1" in (
        topo.stdout
    )
    assert "head node" not in topo.stdout and "published s3://" not in topo.stdout

    # The kubeconfig entry, deleted by hand, is written again; --print writes nothing.
    folder = sandbox.home / "clusters" / "e2e-lifecycle"
    kubeconfig, context = folder / "kubeconfig", f"fmctl-e2e-lifecycle-{region}"
    kubeconfig.unlink()
    wrote = sandbox.fmctl("kubeconfig", "e2e-lifecycle", "--region", region, "--sandbox")
    assert wrote.returncode == 0, wrote.stdout + wrote.stderr
    config = yaml.safe_load(kubeconfig.read_text())
    assert [c["name"] for c in config["contexts"]] == [context]
    assert config["current-context"] == context
    assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
    before = kubeconfig.read_text()
    shown = sandbox.fmctl("kubeconfig", "e2e-lifecycle", "--region", region, "--sandbox", "--print")
    assert yaml.safe_load(shown.stdout)["users"] == config["users"]
    assert kubeconfig.read_text() == before
    missing = sandbox.fmctl("kubeconfig", "e2e-nothing", "--region", region, "--sandbox")
    assert missing.returncode == 1 and "no EKS cluster e2e-nothing" in missing.stderr

    down = sandbox.fmctl("down", "e2e-lifecycle", "--region", region, "--sandbox", "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "38 resources deleted" in down.stdout
    # What it left on this machine goes too: the kubeconfig entry and the local state.
    assert f"removed e2e-lifecycle's entry from {kubeconfig}" in down.stdout
    assert not folder.exists()
    assert raw_leftovers(sandbox, "e2e-lifecycle", region) == []
    gone = sandbox.fmctl("status", "e2e-lifecycle", "--region", region, "--sandbox")
    assert gone.returncode == 1 and "no cluster in" in gone.stdout
    gone = sandbox.fmctl("status", "e2e-lifecycle", "--region", region, "--sandbox", "-o", "json")
    assert gone.returncode == 1 and json.loads(gone.stdout)["exists"] is False


def test_slurm_uploads_the_node_scripts(sandbox: Sandbox, tmp_path: Path) -> None:
    # A reservation of its own: the example's may have been seeded (and said so) by another
    # test this emulator ran first.
    data = yaml.safe_load((ROOT / "examples/p5-slurm-capacity-block.yaml").read_text())
    data["compute"]["gpuPools"][0]["capacity"]["reservationId"] = "cr-0e2e51a0de5c21975"
    spec = spec_file(
        tmp_path, "e2e-slurm", example="p5-slurm-capacity-block.yaml", compute=data["compute"]
    )
    region = region_of(spec)
    result = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "sandbox: seeded cr-0e2e51a0de5c21975" in result.stderr
    s3 = sandbox.aws(region).client("s3")
    bucket = next(i for k, _, i in owned(sandbox, "e2e-slurm", region) if k == "bucket")
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert "e2e-slurm/slurm/actions/on-node-configured.sh" in keys
    assert "e2e-slurm/slurm/jobs/nccl-tests.sbatch" in keys
    policy = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])
    assert policy["Statement"][0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    block = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
    assert all(block.values())
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    down = sandbox.fmctl(
        "down", "e2e-slurm", "--region", region, "--sandbox", "--yes", "--keep-state"
    )
    assert down.returncode == 0, down.stderr
    assert (sandbox.home / "clusters" / "e2e-slurm" / "spec.yaml").exists()
    assert raw_leftovers(sandbox, "e2e-slurm", region) == []


# Two clusters made, one collected: up to 158 s under the suite's load, near the default
# 300 s.
@pytest.mark.timeout(600)
def test_gc_collects_only_expired_clusters(sandbox: Sandbox, tmp_path: Path) -> None:
    short = spec_file(tmp_path, "e2e-gc-short")
    data = yaml.safe_load(short.read_text())
    # Ten minutes: long enough that two ups on a loaded machine finish well inside it.
    data["metadata"]["ttl"] = "10m"
    short.write_text(yaml.safe_dump(data))
    keep = spec_file(tmp_path, "e2e-gc-keep")
    region = region_of(short)
    for spec in (short, keep):
        result = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
        assert result.returncode == 0, result.stderr
    listed = sandbox.fmctl("gc", "--expired", "--dry-run", "--region", region, "--sandbox")
    assert "collect" not in listed.stdout.split("dry run")[0].replace("to collect", "")
    # The spec's ttl became an expires-at tag ten minutes after created-at; rather than wait
    # them out, the tags are moved back below (gc takes the earliest).
    ec2 = sandbox.aws(region).client("ec2")
    vpc = ec2.describe_vpcs(Filters=[{"Name": f"tag:{OWNER_TAG}", "Values": ["e2e-gc-short"]}])[
        "Vpcs"
    ][0]
    tags = {t["Key"]: t["Value"] for t in vpc["Tags"]}
    created = calendar.timegm(time.strptime(tags[CREATED_TAG], "%Y-%m-%dT%H:%M:%SZ"))
    expires = calendar.timegm(time.strptime(tags[EXPIRES_TAG], "%Y-%m-%dT%H:%M:%SZ"))
    assert expires - created == 600
    # Both made two minutes ago (gc takes a cluster's earliest created-at): by age, the
    # short one's ttl (not passed: it ends a minute after its real creation) keeps it; the
    # other has none.
    before = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 120))
    for cluster in ("e2e-gc-short", "e2e-gc-keep"):
        (first,) = ec2.describe_vpcs(Filters=[{"Name": f"tag:{OWNER_TAG}", "Values": [cluster]}])[
            "Vpcs"
        ]
        ec2.create_tags(Resources=[first["VpcId"]], Tags=[{"Key": CREATED_TAG, "Value": before}])
    aged = sandbox.fmctl("gc", "--older-than", "1m", "--dry-run", "--region", region, "--sandbox")
    assert "keep     e2e-gc-short" in aged.stdout and "collect  e2e-gc-keep" in aged.stdout
    forced = sandbox.fmctl(
        "gc", "--older-than", "1m", "--ignore-ttl", "--dry-run", "--region", region, "--sandbox"
    )
    assert "collect  e2e-gc-short" in forced.stdout
    # Age is the reason, and the ttl it overrides is named.
    (line,) = [x for x in forced.stdout.splitlines() if "collect  e2e-gc-short" in x]
    assert "older than 1m (its ttl, not passed, is ignored: --ignore-ttl)" in line, line
    nobody = sandbox.fmctl(
        "gc",
        "--older-than",
        "1m",
        "--tag",
        "team=nobody",
        "--dry-run",
        "--region",
        region,
        "--sandbox",
    )
    assert "0 cluster(s) to collect" in nobody.stdout
    someone = sandbox.fmctl(
        "gc",
        "--older-than",
        "1m",
        "--owner",
        "nobody",
        "--dry-run",
        "--region",
        region,
        "--sandbox",
    )
    assert "0 cluster(s) to collect" in someone.stdout, someone.stdout + someone.stderr
    past = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
    ec2.create_tags(Resources=[vpc["VpcId"]], Tags=[{"Key": EXPIRES_TAG, "Value": past}])
    listed = sandbox.fmctl("gc", "--expired", "--dry-run", "--region", region, "--sandbox")
    assert "collect  e2e-gc-short" in listed.stdout and "keep     e2e-gc-keep" in listed.stdout
    everywhere = sandbox.fmctl("gc", "--expired", "--dry-run", "--all-regions", "--sandbox")
    assert "collect  e2e-gc-short" in everywhere.stdout and f"({region})" in everywhere.stdout
    # Every region read side by side, and said so.
    from provisioner.catalog.regions import REGIONS

    assert f"reading {len(REGIONS)} regions, 8 at a time" in everywhere.stderr
    assert f"read {len(REGIONS)} regions in " in everywhere.stderr
    assert owned(sandbox, "e2e-gc-short", region), "a dry run deletes nothing"
    (line,) = [x for x in listed.stdout.splitlines() if "collect  e2e-gc-short" in x]
    assert "its ttl has passed" in line, line
    folder = sandbox.home / "clusters" / "e2e-gc-short"
    assert folder.is_dir()
    collected = sandbox.fmctl("gc", "--expired", "--yes", "--region", region, "--sandbox")
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert raw_leftovers(sandbox, "e2e-gc-short", region) == []
    # gc is down: the count listed is the count deleted, the file system's data is warned
    # about first, and the local state and kubeconfig entry go too.
    (line,) = [x for x in collected.stdout.splitlines() if "collect  e2e-gc-short" in x]
    listed_count = int(line.split()[2])
    assert f"e2e-gc-short: {listed_count} resources deleted" in collected.stdout
    # A cluster with a ttl has its expiry schedules and the role they run as too.
    assert listed_count == len(P5EN_RESOURCES | {"expiry", "iam/ttl-scheduler"})
    assert "warning: e2e-gc-short: the FSx file system" in collected.stderr
    assert "removed the local state" in collected.stdout and not folder.exists()
    assert "e2e-gc-short's entry" in collected.stdout
    assert {logical for _, logical, _ in owned(sandbox, "e2e-gc-keep", region)} == P5EN_RESOURCES
    sandbox.fmctl("down", "e2e-gc-keep", "--region", region, "--sandbox", "--yes")


def test_gc_needs_a_criterion(sandbox: Sandbox) -> None:
    result = sandbox.fmctl("gc", "--sandbox")
    assert result.returncode == 1 and "--expired" in result.stderr


def test_existing_vpc_is_used_and_left_untouched(sandbox: Sandbox, tmp_path: Path) -> None:
    region = "us-west-2"
    ec2 = sandbox.aws(region).client("ec2")
    vpc = ec2.create_vpc(
        CidrBlock="10.77.0.0/16",
        TagSpecifications=[{"ResourceType": "vpc", "Tags": [{"Key": "team", "Value": "network"}]}],
    )["Vpc"]
    subnet = ec2.create_subnet(
        VpcId=vpc["VpcId"], CidrBlock="10.77.0.0/20", AvailabilityZone="us-west-2a"
    )["Subnet"]
    second = ec2.create_subnet(
        VpcId=vpc["VpcId"], CidrBlock="10.77.16.0/20", AvailabilityZone="us-west-2b"
    )["Subnet"]["SubnetId"]
    spec = spec_file(
        tmp_path,
        "e2e-existing",
        network={
            "availabilityZone": "us-west-2a",
            "vpcId": vpc["VpcId"],
            "subnetId": subnet["SubnetId"],
            "secondarySubnetId": second,
        },
    )
    result = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert result.returncode == 0, result.stdout + result.stderr
    logical = {item[1] for item in owned(sandbox, "e2e-existing", region)}
    assert "vpc" not in logical and "subnet/private" not in logical
    assert {"sg/efa", "sg/fsx", "fsx", "bucket", "eks", "nodegroup/gpu"} <= logical
    eks = sandbox.aws(region).client("eks").describe_cluster(name="e2e-existing")["cluster"]
    assert eks["resourcesVpcConfig"]["subnetIds"] == [subnet["SubnetId"], second]
    down = sandbox.fmctl("down", "e2e-existing", "--region", region, "--sandbox", "--yes")
    assert down.returncode == 0, down.stderr
    after_vpc = ec2.describe_vpcs(VpcIds=[vpc["VpcId"]])["Vpcs"][0]
    after_subnet = ec2.describe_subnets(SubnetIds=[subnet["SubnetId"]])["Subnets"][0]
    assert after_vpc["Tags"] == vpc["Tags"] and after_vpc["CidrBlock"] == "10.77.0.0/16"
    assert after_subnet["CidrBlock"] == subnet["CidrBlock"]
    assert raw_leftovers(sandbox, "e2e-existing", region) == []


def test_two_concurrent_ups(sandbox: Sandbox, tmp_path: Path) -> None:
    """Exactly one of two `up`s at once proceeds; the other names it (whichever took the
    lock first: on a loaded machine the one started first may not be it)."""
    spec = spec_file(tmp_path, "e2e-concurrent")
    region = region_of(spec)
    first = sandbox.spawn("up", "-f", str(spec), "--sandbox", "--yes")
    time.sleep(0.8)  # most often the first takes the lock
    second = sandbox.spawn("up", "-f", str(spec), "--sandbox", "--yes")
    outs = [proc.communicate(timeout=180)[0] for proc in (first, second)]
    codes = [first.returncode, second.returncode]
    assert sorted(codes) == [0, 1], outs
    winner = (first, second)[codes.index(0)]
    refused = outs[codes.index(1)]
    assert "is being changed by arn:aws:sts::123456789012:user/moto on" in refused
    assert f"(pid {winner.pid}, `fmctl up`" in refused and "--wait" in refused
    assert " creating" not in refused
    items = owned(sandbox, "e2e-concurrent", region)
    assert duplicates(items) == {} and {i[1] for i in items} == P5EN_RESOURCES
    sandbox.fmctl("down", "e2e-concurrent", "--region", region, "--sandbox", "--yes")
    assert raw_leftovers(sandbox, "e2e-concurrent", region) == []


def test_down_without_local_state(sandbox: Sandbox, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "e2e-stateless")
    region = region_of(spec)
    assert sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes").returncode == 0
    import shutil

    shutil.rmtree(sandbox.home / "clusters" / "e2e-stateless")
    down = sandbox.fmctl("down", "e2e-stateless", "--region", region, "--sandbox", "--yes")
    assert down.returncode == 0, down.stderr
    assert raw_leftovers(sandbox, "e2e-stateless", region) == []


def test_bad_spec_makes_no_aws_call(sandbox: Sandbox, tmp_path: Path) -> None:
    before = len(sandbox.requests())
    result = sandbox.fmctl(
        "up", "-f", str(Path(__file__).parents[1] / "data/demo-broken.yaml"), "--sandbox", "--yes"
    )
    assert result.returncode == 1 and ":13:21: error:" in result.stderr
    assert "Traceback" not in result.stderr
    assert sandbox.requests()[before:] == []


def test_online_check_rejects_a_reservation_that_does_not_fit(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    spec = spec_file(tmp_path, "e2e-small-cb", example="p5-slurm-capacity-block.yaml")
    data = yaml.safe_load(spec.read_text())
    data["compute"]["gpuPools"][0]["capacity"]["reservationId"] = "cr-0aaaaaaaaaaaaaaaa"
    spec.write_text(yaml.safe_dump(data))
    sandbox.seed(
        {
            "capacityReservationId": "cr-0aaaaaaaaaaaaaaaa",
            "instanceType": "p5.48xlarge",
            "availabilityZone": "us-east-1a",
            "totalInstanceCount": 4,
            "availableInstanceCount": 4,
            "state": "active",
            "reservationType": "capacity-block",
        }
    )
    before = len(sandbox.requests())
    result = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert result.returncode == 1
    assert (
        "reservationId: cr-0aaaaaaaaaaaaaaaa holds 4 instances; the pool asks for 16"
        in result.stderr
    )
    assert created_calls(sandbox.requests()[before:]) == []


def test_sandbox_ignores_real_credentials(sandbox: Sandbox, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "e2e-creds")
    region = region_of(spec)
    before = len(sandbox.requests())
    result = sandbox.fmctl(
        "up",
        "-f",
        str(spec),
        "--sandbox",
        "--yes",
        AWS_ACCESS_KEY_ID="AKIAREALKEY000000000",
        AWS_SECRET_ACCESS_KEY="real-secret",
        AWS_PROFILE="production",
        AWS_ENDPOINT_URL="https://127.0.0.1:1",
        AWS_EC2_METADATA_DISABLED="false",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    seen = fmctl_calls(sandbox.requests()[before:])
    # Every call of fmctl's (the Kubernetes API's tokens included) signed with the sandbox's
    # own key (the cluster's programs use their service accounts' tokens).
    assert seen and {r.get("access_key") for r in seen} == {sandbox.credentials[0]}
    sandbox.fmctl("down", "e2e-creds", "--region", region, "--sandbox", "--yes")
