"""Slurm on AWS PCS end to end in the sandbox: the real `fmctl` against the emulator (moto
plus the PCS shim) over HTTPS: up, up again, status, a pool scaled, its instance type
changed, down; and the one-Creating-cluster-per-region quota waited out."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import yaml

from provisioner.resources.tags import OWNER_TAG
from tests.engine.harness import Sandbox, created_calls, duplicates, owned, raw_leftovers
from tests.tools.fake_slurm import calls, login_slurm

#: What a PCS cluster of one pool owns beside the shared network, bucket and FSx.
PCS_RESOURCES = {
    "sg/pcs-cluster",
    "iam/pcs-node",
    "pcs/cluster",
    "launch-template/pcs/login",
    "launch-template/pcs/train",
    "pcs/node-group/login",
    "pcs/node-group/train",
    "pcs/queue/train",
}


def pcs_spec(
    tmp: Path, name: str, region: str = "us-east-2", version: str = "25.11", **pool: Any
) -> Path:
    """A PCS cluster of one p5en pool (on demand), new VPC, new FSx."""
    data = {
        "apiVersion": "fmctl.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": name, "region": region},
        "scheduler": "slurm",
        "network": {"availabilityZone": f"{region}a"},
        "compute": {
            "gpuPools": [{"name": "train", "instanceType": "p5en.48xlarge", "count": 2, **pool}]
        },
        "storage": {"fsxLustre": {"capacityGiB": 1200}},
        "slurm": {"provider": "pcs", "pcs": {"slurmVersion": version}},
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _instances(sandbox: Sandbox, region: str, name: str) -> dict[str, list[str]]:
    """Running instances of the cluster, by pool, with their PCS node group tag."""
    ec2 = sandbox.aws(region).client("ec2")
    out: dict[str, list[str]] = {}
    mine = [{"Name": f"tag:{OWNER_TAG}", "Values": [name]}]
    for reservation in ec2.describe_instances(Filters=mine)["Reservations"]:
        for i in reservation["Instances"]:
            if i["State"]["Name"] != "running":
                continue
            tags = {t["Key"]: t["Value"] for t in i["Tags"]}
            assert tags["aws:pcs:compute-node-group-id"].startswith("pcs_")
            out.setdefault(tags["fmctl.dev/pool"], []).append(i["InstanceType"])
    return out


def test_pcs_up_again_status_scale_replace_down(sandbox: Sandbox, tmp_path: Path) -> None:
    name, region = "e2e-pcs", "us-east-2"
    spec = pcs_spec(tmp_path, name, region)
    first = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert first.returncode == 0, first.stdout + first.stderr
    items = owned(sandbox, name, region)
    assert {logical for _, logical, _ in items} >= PCS_RESOURCES
    assert not any("parallelcluster" in logical for _, logical, _ in items)
    assert duplicates(items) == {}
    assert _instances(sandbox, region, name) == {
        "login": ["m7i.4xlarge"],
        "train": ["p5en.48xlarge"] * 2,
    }
    pcs = sandbox.aws(region).client("pcs")
    (cluster,) = [
        c
        for c in pcs.list_clusters()["clusters"]
        if pcs.list_tags_for_resource(resourceArn=c["arn"])["tags"].get(OWNER_TAG) == name
    ]
    detail = pcs.get_cluster(clusterIdentifier=cluster["id"])["cluster"]
    assert detail["scheduler"] == {"type": "SLURM", "version": "25.11"}
    settings = {s["parameterName"] for s in detail["slurmConfiguration"]["slurmCustomSettings"]}
    assert {"Prolog", "Epilog"} <= settings
    role = sandbox.aws(region).client("iam").get_role(RoleName=f"fmctl-{name}-{region}-pcs-node")
    assert role["Role"]["Path"] == "/aws-pcs/"  # PCS accepts node roles by this path
    # The sandbox runs no Slurm on a PCS cluster's login node: `fmctl health` says so,
    # located, exit 1, no traceback.
    health = sandbox.fmctl("health", name, "-f", str(spec), "--sandbox")
    assert health.returncode == 1, health.stdout + health.stderr
    assert "the sandbox's instances run no programs (no Slurm" in health.stderr, health.stderr
    assert "Traceback" not in health.stderr, health.stderr

    before = len(sandbox.requests())
    again = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert again.returncode == 0, again.stderr
    assert " 0 created," in again.stdout and "0 updated, 0 replaced, 0 deleted" in again.stdout
    assert created_calls(sandbox.requests()[before:]) == []
    assert owned(sandbox, name, region) == items

    # PCS's own health checks on the GPU group (spec health:, on by default): monitoring and
    # DCGM level 1 at every start, an instance that fails replaced; none on the login nodes.
    # Turned off, PCS is told so explicitly (an update replaces all of them); then back on.
    def groups_now(key: str) -> dict[str, Any]:
        groups = pcs.list_compute_node_groups(clusterIdentifier=cluster["id"])
        return {
            g["name"]: pcs.get_compute_node_group(
                clusterIdentifier=cluster["id"], computeNodeGroupIdentifier=g["id"]
            )["computeNodeGroup"].get(key)
            for g in groups["computeNodeGroups"]
        }

    def checks() -> dict[str, Any]:
        return groups_now("instanceHealthChecks")

    def train_instances() -> set[str]:
        found = (
            sandbox.aws(region)
            .client("ec2")
            .describe_instances(
                Filters=[
                    {"Name": f"tag:{OWNER_TAG}", "Values": [name]},
                    {"Name": "tag:fmctl.dev/pool", "Values": ["train"]},
                    {"Name": "instance-state-name", "Values": ["running"]},
                ]
            )
        )
        return {i["InstanceId"] for r in found["Reservations"] for i in r["Instances"]}

    # fmctl's verify gate on the GPU group's nodes (nodeLifecycleActions): before slurmd at
    # every boot, the node terminated if it fails; the pair once it registers. Each script
    # is in the artifact bucket as the request names it, with the SHA-256 it pins.
    actions = groups_now("nodeLifecycleActions")
    assert actions["login"] is None
    stages = actions["train"]["stages"]
    (gate,) = stages["nodeBootstrapped"]
    (pair,) = stages["nodeReady"]
    assert (gate["name"], gate["onError"], gate["executionPolicy"]) == (
        "fmctl-verify",
        "TERMINATE",
        "EVERY_BOOT",
    )
    assert gate["arguments"][:2] == ["compute", gate["arguments"][1]]
    assert (pair["name"], pair["onError"]) == ("fmctl-verify-pair", "TERMINATE")
    s3 = sandbox.aws(region).client("s3")
    for script in (gate, pair):
        bucket, _, key = (
            script["scriptSource"]["scriptLocation"].removeprefix("s3://").partition("/")
        )
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert hashlib.sha256(body).hexdigest() == script["scriptSource"]["checksum"], key

    on = {
        "healthMonitoring": {"mode": "STANDARD", "repairAction": "REPLACE"},
        "deepHealthChecks": {"onStart": {"profile": "QUICK", "repairAction": "REPLACE"}},
    }
    assert checks() == {"login": None, "train": on}
    data = yaml.safe_load(spec.read_text())
    data["health"] = {"enabled": False}
    off = tmp_path / "health-off.yaml"
    off.write_text(yaml.safe_dump(data, sort_keys=False))
    planned = sandbox.fmctl("plan", "-f", str(off), "--sandbox", "-o", "json")
    (change,) = [
        c for c in json.loads(planned.stdout)["changes"] if c["resource"] == "pcs/node-group/train"
    ]
    assert [f["path"] for f in change["fields"]] == ["health_checks", "lifecycle"], change
    assert "replaces them" in change["fields"][1]["note"], change
    before_off = train_instances()
    assert sandbox.fmctl("up", "-f", str(off), "--sandbox", "--yes").returncode == 0
    # New lifecycle actions: PCS replaces the group's nodes (its User Guide).
    assert train_instances().isdisjoint(before_off) and len(train_instances()) == len(before_off)
    none = {
        "healthMonitoring": {"mode": "NONE"},
        "deepHealthChecks": {"onStart": {"profile": "NONE"}},
    }
    assert checks() == {"login": None, "train": none}
    # No stage has a script: health off, the gate is gone from the group's next boots.
    assert not groups_now("nodeLifecycleActions")["train"]["stages"]
    back = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert back.returncode == 0, back.stdout + back.stderr
    assert checks()["train"] == on
    assert groups_now("nodeLifecycleActions")["train"]["stages"] == stages

    # A fault on a GPU instance (`fmctl sandbox fault`): PCS's health monitoring leaves an
    # application's Xid alone and replaces the instance for Xid 79 (REPLACE, health.repair's
    # default); the group keeps its count with a new instance.
    train = train_instances
    running = train()
    sick = sorted(running)[0]
    fault = ("sandbox", "fault", name, sick, "--region", region)
    said = sandbox.fmctl(*fault, "--xid", "13")
    assert said.returncode == 0 and "a warning" in said.stdout, said.stdout + said.stderr
    assert train() == running
    said = sandbox.fmctl(*fault, "--xid", "79")
    assert said.returncode == 0 and "replaced it (REPLACE)" in said.stdout, said.stdout
    now = train()
    assert sick not in now and len(now) == 2 and running - {sick} <= now
    gone = sandbox.fmctl(
        "sandbox", "fault", name, "i-0123456789abcdef0", "--region", region, "--xid", "79"
    )
    assert gone.returncode == 1 and "no instance i-0123456789abcdef0" in gone.stderr

    status = sandbox.fmctl("status", name, "--region", region, "--sandbox", "-o", "json")
    assert status.returncode == 0, status.stderr
    seen = json.loads(status.stdout)
    assert {r["resource"] for r in seen["resources"]} >= PCS_RESOURCES
    view = seen["pcs"]
    assert view["status"] == "ACTIVE" and view["slurmVersion"] == "25.11"
    groups = {g["name"]: g for g in view["nodeGroups"]}
    assert set(groups) == {"login", "train"}
    assert len(groups["train"]["instances"]) == 2 and groups["train"]["status"] == "ACTIVE"
    assert [(q["name"], q["nodeGroups"]) for q in view["queues"]] == [("train", ["train"])]
    listed = sandbox.fmctl("list", "--region", region, "--sandbox", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    rows = [r for r in json.loads(listed.stdout) if r["name"] == name]
    assert [(r["scheduler"], r["provider"], r["state"]) for r in rows] == [
        ("slurm", "pcs", "ACTIVE")
    ]
    text = sandbox.fmctl("status", name, "--region", region, "--sandbox")
    assert "PCS cluster" in text.stdout and "queue train" in text.stdout, text.stdout

    login = groups["login"]["instances"][0]["id"]
    shell = sandbox.fmctl("connect", name, "--region", region, "--sandbox", "--print")
    assert shell.returncode == 0 and f"--target {login}" in shell.stdout, shell.stderr
    head = sandbox.fmctl("connect", name, "--region", region, "--sandbox", "--print", "--head")
    assert head.returncode == 1 and "no head node" in head.stderr
    topo = sandbox.fmctl("topology", name, "--region", region, "--sandbox")
    assert topo.returncode == 0, topo.stderr
    assert "2 instances under" in topo.stdout and "is a PCS cluster" in topo.stdout

    # Day 2: scale the pool in place (UpdateComputeNodeGroup), then change its instance type
    # (a new node group takes the queue over, the old one goes).
    scaled = pcs_spec(tmp_path, name, region, count=3)
    up = sandbox.fmctl("up", "-f", str(scaled), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "1 updated, 0 replaced" in up.stdout
    assert _instances(sandbox, region, name)["train"] == ["p5en.48xlarge"] * 3

    retyped = pcs_spec(tmp_path, name, region, count=3, instanceType="p5.48xlarge")
    refused = sandbox.fmctl("up", "-f", str(retyped), "--sandbox", "--yes")
    assert refused.returncode == 1 and "replaces pcs/node-group/train" in refused.stderr
    # Everything that changes with it (the launch template's new version, the queue that
    # moves) is the spec's doing: none of it is drift.
    planned = sandbox.fmctl("plan", "-f", str(retyped), "--sandbox", "-o", "json")
    fields = [f for c in json.loads(planned.stdout)["changes"] for f in c["fields"]]
    assert fields and not [f for f in fields if f.get("drift")], fields
    # The old group's nodes are drained on the login node before the group goes.
    with login_slurm(sandbox, tmp_path / "slurm") as slurm:
        replaced = sandbox.fmctl("up", "-f", str(retyped), "--sandbox", "--yes", "--allow-replace")
    assert replaced.returncode == 0, replaced.stdout + replaced.stderr
    assert "1 replaced" in replaced.stdout
    assert any(
        c.startswith("scontrol update NodeName=train-[1-3] State=DRAIN") for c in calls(slurm)
    ), calls(slurm)
    assert _instances(sandbox, region, name)["train"] == ["p5.48xlarge"] * 3
    after = owned(sandbox, name, region)
    assert duplicates(after) == {}, after

    # An instance PCS launched and did not terminate is swept by its tags; one that is not
    # the cluster's (no fmctl tag) is left alone.
    ec2 = sandbox.aws(region).client("ec2")
    subnet = ec2.describe_subnets(Filters=[{"Name": f"tag:{OWNER_TAG}", "Values": [name]}])[
        "Subnets"
    ][0]["SubnetId"]

    def launch(subnet: str, tags: dict[str, str]) -> str:
        spec = [
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ]
        made = ec2.run_instances(
            ImageId="ami-12c6146b", MinCount=1, MaxCount=1, SubnetId=subnet, TagSpecifications=spec
        )
        return str(made["Instances"][0]["InstanceId"])

    stray = launch(subnet, {OWNER_TAG: name, "aws:pcs:cluster-id": cluster["id"]})
    elsewhere = ec2.create_vpc(CidrBlock="10.8.0.0/16")["Vpc"]["VpcId"]
    their = ec2.create_subnet(VpcId=elsewhere, CidrBlock="10.8.1.0/24")["Subnet"]["SubnetId"]
    foreign = launch(their, {"aws:pcs:cluster-id": cluster["id"], "owner": "someone"})

    down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert stray in down.stdout and foreign not in down.stdout
    assert raw_leftovers(sandbox, name, region) == []
    (kept,) = ec2.describe_instances(InstanceIds=[foreign])["Reservations"][0]["Instances"]
    assert kept["State"]["Name"] == "running"
    ec2.terminate_instances(InstanceIds=[foreign])
    ec2.delete_subnet(SubnetId=their)
    ec2.delete_vpc(VpcId=elsewhere)


def test_pcs_waits_behind_another_cluster_being_created(sandbox: Sandbox, tmp_path: Path) -> None:
    """One PCS cluster Creating per region and account (CreateCluster's reference): fmctl
    waits behind clusters it did not make, says so, and creates its own once none is
    Creating; the others are never touched.

    Someone else's cluster is held Creating until fmctl has been turned away twice (a real
    create takes minutes; at the sandbox's scale it would land in about a second, and a run
    slowed by a busy machine could then reach CreateCluster after it, waiting behind
    nothing)."""
    name, region = "e2e-pcs-quota", "eu-north-1"
    aws = sandbox.aws(region)
    ec2, pcs = aws.client("ec2"), aws.client("pcs")
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.1.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="other", Description="x", VpcId=vpc)["GroupId"]
    other = pcs.create_cluster(
        clusterName="someone-elses-0",
        scheduler={"type": "SLURM", "version": "25.11"},
        size="SMALL",
        networking={"subnetIds": [subnet], "securityGroupIds": [group]},
    )["cluster"]["id"]
    sandbox.pcs_hold(other, True)
    seen = len(sandbox.requests())

    def waiting() -> bool:
        """fmctl's CreateCluster was refused, and it has since looked again at who is
        Creating (it waits, rather than failing or creating anyway)."""
        log = sandbox.requests()[seen:]
        refused = [
            i
            for i, r in enumerate(log)
            if r["action"] == "CreateCluster" and r.get("status") == 400
        ]
        return bool(refused) and any(r["action"] == "ListClusters" for r in log[refused[0] :])

    spec = pcs_spec(tmp_path, name, region)
    run = sandbox.spawn("up", "-f", str(spec), "--sandbox", "--yes")
    try:
        deadline = time.monotonic() + 120
        while not waiting() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert run.poll() is None, "up ended while another cluster was Creating"
        assert waiting(), "up never reached CreateCluster"
        creates = [r for r in sandbox.requests()[seen:] if r["action"] == "CreateCluster"]
        assert creates and all(r["status"] == 400 for r in creates), creates
        sandbox.pcs_hold(other, False)
        output, _ = run.communicate(timeout=180)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, output
    assert "one cluster at a time" in output and "someone-elses-0" in output, output
    down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []
    # The cluster fmctl waited behind is not its own: untouched by up and by down.
    assert pcs.get_cluster(clusterIdentifier=other)["cluster"]["status"] == "ACTIVE"
    for _ in range(200):
        try:
            pcs.delete_cluster(clusterIdentifier=other)
            break
        except pcs.exceptions.ConflictException:
            time.sleep(0.05)


def test_pcs_online_checks_are_located(sandbox: Sandbox, tmp_path: Path) -> None:
    """Before anything is made: the nodes' AMI exists (slurm.amiId, or AWS's sample AMI for
    the version), and no PCS cluster of the name is someone else's."""
    from provisioner.catalog import load_catalog
    from provisioner.ops.validate import load_and_validate
    from provisioner.validate.online import online_problems

    # A region no other PCS test of the session seeds a sample AMI in (the sandbox is the
    # worker's: a run that came first would have registered 25.11's).
    region = "ca-central-1"

    def problems(path: Path) -> dict[str, tuple[str, str]]:
        validation = load_and_validate(str(path))
        assert validation.resolved is not None
        found = online_problems(sandbox.aws(region), validation.resolved, load_catalog())
        return {p.code: (p.message, p.dotted_path) for p in found}

    spec = pcs_spec(tmp_path, "online-pcs", region)
    data = yaml.safe_load(spec.read_text())
    data["slurm"]["pcs"]["slurmVersion"] = "25.11"  # no sample AMI seeded for it here
    spec.write_text(yaml.safe_dump(data))
    message, where = problems(spec)["pcs-ami"]
    assert "aws-pcs-sample_ami-al2023-x86_64-slurm-25.11" in message
    assert where == "slurm.pcs.slurmVersion"

    data["slurm"]["amiId"] = "ami-0123456789abcdef0"
    spec.write_text(yaml.safe_dump(data))
    message, where = problems(spec)["pcs-ami"]
    assert "no AMI ami-0123456789abcdef0" in message and where == "slurm.amiId"
    # An image whose root is not /dev/xvda: the launch templates' root volume would be a
    # second volume, the image's own root left as it is.
    ec2 = sandbox.aws(region).client("ec2")
    ubuntu = ec2.register_image(
        Name="own-ubuntu-pcs-image", Architecture="x86_64", RootDeviceName="/dev/sda1"
    )["ImageId"]
    data["slurm"]["amiId"] = ubuntu
    spec.write_text(yaml.safe_dump(data))
    try:
        message, where = problems(spec)["pcs-ami"]
        assert "root device is /dev/sda1" in message and where == "slurm.amiId", message
    finally:
        ec2.deregister_image(ImageId=ubuntu)
    data["slurm"]["amiId"] = "ami-0123456789abcdef0"
    spec.write_text(yaml.safe_dump(data))

    aws = sandbox.aws(region)
    ec2, pcs = aws.client("ec2"), aws.client("pcs")
    vpc = ec2.create_vpc(CidrBlock="10.7.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.7.1.0/24")["Subnet"]["SubnetId"]
    theirs = pcs.create_cluster(
        clusterName="online-pcs",
        scheduler={"type": "SLURM", "version": "25.11"},
        size="SMALL",
        networking={"subnetIds": [subnet]},
    )["cluster"]
    try:
        message, where = problems(spec)["pcs-name-taken"]
        assert theirs["id"] in message and where == "metadata.name"
    finally:
        for _ in range(200):
            try:
                pcs.delete_cluster(clusterIdentifier=theirs["id"])
                break
            except pcs.exceptions.ConflictException:
                time.sleep(0.05)


def test_pcs_upgrades_slurm_in_place_and_never_down(sandbox: Sandbox, tmp_path: Path) -> None:
    """A newer slurmVersion is UpdateCluster's scheduler (plan says update; up applies it;
    the cluster stays, with its id); an older one is refused before any write. PCS creates
    no cluster on a version past its end of life (the shim judges by the sandbox's day)."""
    name, region = "e2e-pcs-upgrade", "us-west-2"
    aws = sandbox.aws(region)
    ec2, pcs = aws.client("ec2"), aws.client("pcs")
    # 26.05 has no sample AMI: an image of the user's with both versions (PCS's rolling
    # update asks for one), used from the start.
    ami = ec2.register_image(
        Name="own-pcs-image-25.11-26.05", Architecture="x86_64", RootDeviceName="/dev/xvda"
    )["ImageId"]

    def spec_at(version: str) -> Path:
        path = pcs_spec(tmp_path, name, region, version=version)
        data = yaml.safe_load(path.read_text())
        data["slurm"]["amiId"] = ami
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def version() -> tuple[str, str]:
        (c,) = [
            c
            for c in pcs.list_clusters()["clusters"]
            if pcs.list_tags_for_resource(resourceArn=c["arn"])["tags"].get(OWNER_TAG) == name
        ]
        detail = pcs.get_cluster(clusterIdentifier=c["id"])["cluster"]
        return c["id"], detail["scheduler"]["version"]

    first = sandbox.fmctl("up", "-f", str(spec_at("25.11")), "--sandbox", "--yes")
    assert first.returncode == 0, first.stdout + first.stderr
    ident, at = version()
    assert at == "25.11"
    try:
        before = len(sandbox.requests())
        plan = sandbox.fmctl("plan", "-f", str(spec_at("26.05")), "--sandbox", "-o", "json")
        assert plan.returncode == 0, plan.stdout + plan.stderr
        assert not [r for r in sandbox.requests()[before:] if r["action"] == "UpdateCluster"]
        steps = {r["resource"]: r for r in json.loads(plan.stdout)["changes"]}
        cluster = steps["pcs/cluster"]
        assert cluster["action"] == "update", cluster
        assert "slurm_version" in json.dumps(cluster) and "26.05" in json.dumps(cluster)

        up = sandbox.fmctl("up", "-f", str(spec_at("26.05")), "--sandbox", "--yes")
        assert up.returncode == 0, up.stdout + up.stderr
        assert version() == (ident, "26.05")
        updates = [r for r in sandbox.requests()[before:] if r["action"] == "UpdateCluster"]
        assert updates, "the upgrade is UpdateCluster, not a new cluster"
        assert not [r for r in sandbox.requests()[before:] if r["action"] == "CreateCluster"]

        # A downgrade: the plan says up will refuse it (and fails), then up does.
        planned = sandbox.fmctl("plan", "-f", str(spec_at("25.11")), "--sandbox", "-o", "json")
        assert planned.returncode == 1, planned.stdout + planned.stderr
        refusal = {r["resource"]: r for r in json.loads(planned.stdout)["refusals"]}
        assert "cannot downgrade" in refusal["pcs/cluster"]["reason"], refusal
        before = len(sandbox.requests())
        down = sandbox.fmctl("up", "-f", str(spec_at("25.11")), "--sandbox", "--yes")
        assert down.returncode == 1 and "cannot downgrade" in down.stderr, down.stderr
        assert not [r for r in sandbox.requests()[before:] if r["action"].startswith("Update")]
        assert version() == (ident, "26.05")
    finally:
        gone = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert gone.returncode == 0, gone.stdout + gone.stderr
        ec2.deregister_image(ImageId=ami)
    assert raw_leftovers(sandbox, name, region) == []


def test_the_sandbox_creates_no_cluster_on_a_version_past_its_end_of_life(
    sandbox: Sandbox,
) -> None:
    """As PCS: 24.11 ended on 2026-05-31, so CreateCluster refuses it (the sandbox's day is
    the machine's; tests/engine/test_sandbox_facts.py moves it for the boundary)."""
    import botocore.exceptions

    aws = sandbox.aws("ap-northeast-1")
    ec2, pcs = aws.client("ec2"), aws.client("pcs")
    vpc = ec2.create_vpc(CidrBlock="10.11.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.11.1.0/24")["Subnet"]["SubnetId"]
    try:
        request = {
            "clusterName": "too-old",
            "size": "SMALL",
            "networking": {"subnetIds": [subnet]},
        }
        try:
            pcs.create_cluster(scheduler={"type": "SLURM", "version": "24.11"}, **request)
            raise AssertionError("a 24.11 cluster was created after its end of life")
        except botocore.exceptions.ClientError as err:
            assert err.response["Error"]["Code"] == "ValidationException"
            assert "2026-05-31" in err.response["Error"]["Message"]
    finally:
        ec2.delete_subnet(SubnetId=subnet)
        ec2.delete_vpc(VpcId=vpc)


def test_the_pcs_starters_are_made_by_the_sandbox(sandbox: Sandbox, tmp_path: Path) -> None:
    """`fmctl init --provider pcs` for p5 and p6-b200: specs PCS takes as they are (a
    version it still creates clusters on, a sample AMI whose driver runs the GPUs), made and
    removed in the sandbox with nothing left."""
    for itype, name, region in (
        ("p5.48xlarge", "starter-p5", "us-east-2"),
        ("p6-b200.48xlarge", "starter-b200", "us-west-2"),
    ):
        made = sandbox.fmctl(
            "init",
            "--scheduler",
            "slurm",
            "--provider",
            "pcs",
            "--instance-type",
            itype,
            "--name",
            name,
            "--region",
            region,
        )
        assert made.returncode == 0, made.stderr
        path = tmp_path / f"{name}.yaml"
        path.write_text(made.stdout)
        up = sandbox.fmctl("up", "-f", str(path), "--sandbox", "--yes")
        assert up.returncode == 0, up.stdout + up.stderr
        assert _instances(sandbox, region, name)["train"] == [itype] * 2
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
        assert raw_leftovers(sandbox, name, region) == []


def test_pcs_up_wait_healthy_waits_for_the_nodes_verify_gate(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """`up --wait-healthy` on PCS asks the login node's Slurm (cluster-health.sh through Run
    Command): a node still held for its NCCL pair (the verify gate's reservation, sinfo's
    "reserved") is not in service, and the wait ends once it is idle. The login node's Slurm
    is the test's fake (tests/tools/fake_slurm.py: the sandbox runs no Slurm), its answers in
    cluster-health.sh's format as the real sinfo and scontrol print them."""
    import threading

    name, region = "e2e-pcs-healthy", "ap-south-1"
    spec = pcs_spec(tmp_path, name, region)
    with login_slurm(sandbox, tmp_path / "slurm") as slurm:
        (slurm / "sinfo.txt").write_text(
            "train|idle|Unknown|train-1|none\ntrain|reserved|Unknown|train-2|none\n"
        )
        (slurm / "reservations").write_text("fmctl-verify-train-2\n")
        flipped = threading.Event()

        def pair_passes() -> None:
            # Once the wait has looked twice, the pair passes: the reservation goes.
            deadline = time.monotonic() + 170
            while time.monotonic() < deadline:
                if sum(c.startswith("sinfo ") for c in calls(slurm)) >= 2:
                    (slurm / "reservations").write_text("")
                    (slurm / "sinfo.txt").write_text("train|idle|Unknown|train-[1-2]|none\n")
                    flipped.set()
                    return
                time.sleep(0.05)

        watcher = threading.Thread(target=pair_passes, daemon=True)
        watcher.start()
        try:
            up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", "--wait-healthy")
        finally:
            watcher.join(5)
        assert up.returncode == 0, up.stdout + up.stderr
        assert flipped.is_set()
        assert "health: healthy nodes: train 1/2" in up.stderr, up.stderr
        assert "healthy: 2 GPU nodes in service" in up.stdout, up.stdout
        # Read-only: the wait asked, it changed nothing.
        assert not [c for c in calls(slurm) if c.startswith(("scontrol update", "scancel"))]
    down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []
