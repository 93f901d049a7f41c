"""Online checks against the emulator: the data bucket of the file system, and the
reservation's platform."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from provisioner.catalog import load_catalog
from provisioner.ops.validate import load_and_validate
from provisioner.validate.online import online_problems
from tests.engine.harness import Sandbox, region_of, spec_file


def _problems(sandbox: Sandbox, spec: Path) -> dict[str, tuple[str, str]]:
    validation = load_and_validate(str(spec))
    assert validation.resolved is not None
    found = online_problems(sandbox.aws(region_of(spec)), validation.resolved, load_catalog())
    return {p.code: (p.message, ".".join(map(str, p.path))) for p in found}


def _with_bucket(tmp_path: Path, name: str, bucket: str) -> Path:
    spec = spec_file(tmp_path, name)  # p5en on EKS with FSx linked to S3, us-west-2
    data = yaml.safe_load(spec.read_text())
    data["storage"]["fsxLustre"]["s3"] = {"importPath": f"s3://{bucket}/data"}
    spec.write_text(yaml.safe_dump(data))
    return spec


def test_missing_data_bucket_is_located(sandbox: Sandbox, tmp_path: Path) -> None:
    spec = _with_bucket(tmp_path, "online-nobucket", "fmctl-test-no-such-bucket")
    problems = _problems(sandbox, spec)
    message, path = problems["data-bucket-missing"]
    assert "fmctl-test-no-such-bucket does not exist" in message
    assert path == "storage.fsxLustre.s3.importPath"


def test_data_bucket_in_another_region(sandbox: Sandbox, tmp_path: Path) -> None:
    bucket = "fmctl-test-far-away-data"
    spec = _with_bucket(tmp_path, "online-far", bucket)
    assert region_of(spec) != "eu-west-1"
    sandbox.aws("eu-west-1").client("s3").create_bucket(
        Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
    )
    problems = _problems(sandbox, spec)
    assert "data-bucket-missing" not in problems
    message, _ = problems["data-bucket-region"]
    assert f"is in eu-west-1; the cluster is in {region_of(spec)}" in message
    sandbox.aws("eu-west-1").client("s3").delete_bucket(Bucket=bucket)


def test_data_bucket_in_the_cluster_region_passes(sandbox: Sandbox, tmp_path: Path) -> None:
    bucket = "fmctl-test-near-data"
    spec = _with_bucket(tmp_path, "online-near", bucket)
    region = region_of(spec)
    sandbox.aws(region).client("s3").create_bucket(
        Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region}
    )
    problems = _problems(sandbox, spec)
    assert not {"data-bucket-missing", "data-bucket-region"} & set(problems)
    sandbox.aws(region).client("s3").delete_bucket(Bucket=bucket)


def test_sandbox_child_env_carries_no_real_credentials(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_PROFILE", "production")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "real-looking-token")
    env = sandbox.aws("us-east-1").child_env()
    assert "AWS_PROFILE" not in env and "AWS_SESSION_TOKEN" not in env
    assert env["AWS_ENDPOINT_URL"] == sandbox.endpoint
    assert env["AWS_CA_BUNDLE"] == sandbox.info["ca"]
    assert env["AWS_EC2_METADATA_DISABLED"] == "true"
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == sandbox.credentials


def test_plan_in_the_sandbox_stands_in_for_what_the_spec_names(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """`plan --sandbox` (as `make demo` runs it) seeds the data bucket and reservations the
    spec names, like `up --sandbox`, and says so: its online checks then pass."""
    import subprocess
    import sys

    from tests.engine.harness import ROOT

    spec = spec_file(tmp_path, "online-plan")  # links s3://acme-ml-data
    done = subprocess.run(
        [sys.executable, "-m", "provisioner", "plan", "-f", str(spec), "--sandbox"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=sandbox.env(),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    names = [b["Name"] for b in sandbox.aws("us-west-2").client("s3").list_buckets()["Buckets"]]
    assert "acme-ml-data" in names


def test_what_one_spec_seeded_never_fails_the_next(sandbox: Sandbox, tmp_path: Path) -> None:
    """A spec in us-west-2 has the sandbox seed its data bucket and its reservation; the next
    spec names the same bucket in us-east-2, and the same reservation for other instances:
    the bucket moves there (with what it holds), the reservation is seeded again, both said
    aloud, and the online checks pass. A reservation the sandbox did not seed is left as it
    is for the checks to judge (test_lifecycle's reservation that does not fit)."""
    bucket, rid = "fmctl-test-seeded-data", "cr-0cccccccccccccccc"

    def spec(name: str, region: str, itype: str, count: int) -> Path:
        path = _with_bucket(tmp_path / name, name, bucket)
        data = yaml.safe_load(path.read_text())
        data["metadata"]["region"] = region
        data["network"]["availabilityZone"] = f"{region}a"
        pool = data["compute"]["gpuPools"][0]
        pool.update(instanceType=itype, count=count)
        pool["capacity"] = {"type": "capacity-block", "reservationId": rid}
        path.write_text(yaml.safe_dump(data))
        return path

    def plan(path: Path) -> str:
        done = sandbox.fmctl("plan", "-f", str(path), "--sandbox")
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stderr

    (tmp_path / "seed-west").mkdir()
    (tmp_path / "seed-east").mkdir()
    first = plan(spec("seed-west", "us-west-2", "p5en.48xlarge", 8))
    assert f"created data bucket {bucket}" in first and f"seeded {rid}" in first
    s3 = sandbox.aws("us-west-2").client("s3")
    s3.put_object(Bucket=bucket, Key="data/shard-0", Body=b"tokens")

    second = plan(spec("seed-east", "us-east-2", "p5.48xlarge", 4))
    assert f"moved data bucket {bucket} from us-west-2 to us-east-2" in second, second
    assert f"seeded {rid}" in second  # in us-east-2: a reservation is its region's
    assert s3.get_bucket_location(Bucket=bucket)["LocationConstraint"] == "us-east-2"
    assert s3.get_object(Bucket=bucket, Key="data/shard-0")["Body"].read() == b"tokens"

    third = plan(spec("seed-east", "us-east-2", "p5.48xlarge", 2))
    assert f"seeded again {rid} (2 x p5.48xlarge" in third


@pytest.mark.parametrize(
    ("declared", "actual", "said"),
    [
        ("reservation", "capacity-block", "is a Capacity Block, declared as type: reservation"),
        ("capacity-block", "default", "is an On-Demand Capacity Reservation, not a Capacity"),
    ],
)
def test_reservation_declared_as_the_other_type(
    sandbox: Sandbox, tmp_path: Path, declared: str, actual: str, said: str
) -> None:
    """EC2 says which a reservation is (ReservationType); a spec that declares the other
    kind would launch with the wrong market type, so it is refused at the pool's type."""
    rid = "cr-0ddddddddddddddd" + ("1" if declared == "reservation" else "2")
    spec = spec_file(tmp_path, f"online-{declared}")
    data = yaml.safe_load(spec.read_text())
    pool = data["compute"]["gpuPools"][0]
    pool["capacity"] = {"type": declared, "reservationId": rid}
    spec.write_text(yaml.safe_dump(data))
    sandbox.seed(
        {
            "capacityReservationId": rid,
            "instanceType": pool["instanceType"],
            "availabilityZone": data["network"]["availabilityZone"],
            "totalInstanceCount": pool["count"],
            "availableInstanceCount": pool["count"],
            "state": "active",
            "reservationType": actual,
        }
    )
    message, path = _problems(sandbox, spec)["reservation-mismatch"]
    assert said in message and rid in message
    assert path == "compute.gpuPools.0.capacity.type"


def test_existing_vpc_subnets_and_file_system_are_checked(sandbox: Sandbox, tmp_path: Path) -> None:
    """What the spec names but fmctl does not make is read before anything is created:
    missing ids, a subnet of another VPC or AZ, a secondary subnet in the nodes' own AZ, and
    a file system in another VPC are each refused at their own line."""
    region = "us-west-2"
    ec2 = sandbox.aws(region).client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.78.0.0/16")["Vpc"]["VpcId"]
    other = ec2.create_vpc(CidrBlock="10.79.0.0/16")["Vpc"]["VpcId"]

    def subnet(in_vpc: str, cidr: str, az: str) -> str:
        made = ec2.create_subnet(VpcId=in_vpc, CidrBlock=cidr, AvailabilityZone=az)
        return str(made["Subnet"]["SubnetId"])

    wrong_az = subnet(vpc, "10.78.0.0/20", "us-west-2c")
    same_az = subnet(vpc, "10.78.16.0/20", "us-west-2a")
    second = subnet(vpc, "10.78.32.0/20", "us-west-2b")
    foreign = subnet(other, "10.79.0.0/20", "us-west-2a")
    foreign_second = subnet(other, "10.79.16.0/20", "us-west-2b")
    # The file system's group: TCP 988 from the VPC, 1018-1023 not yet.
    lustre = ec2.create_security_group(GroupName="lustre", Description="fsx", VpcId=other)
    group = lustre["GroupId"]
    ec2.authorize_security_group_ingress(
        GroupId=group,
        IpPermissions=[
            {
                "IpProtocol": "tcp",
                "FromPort": 988,
                "ToPort": 988,
                "IpRanges": [{"CidrIp": "10.79.0.0/16"}],
            }
        ],
    )
    fs = (
        sandbox.aws(region)
        .client("fsx")
        .create_file_system(
            FileSystemType="LUSTRE",
            StorageCapacity=1200,
            SubnetIds=[foreign],
            SecurityGroupIds=[group],
            LustreConfiguration={"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250},
        )["FileSystem"]["FileSystemId"]
    )
    for _ in range(600):  # the emulator's file systems take their (shortened) time
        (described,) = (
            sandbox.aws(region)
            .client("fsx")
            .describe_file_systems(FileSystemIds=[fs])["FileSystems"]
        )
        if described["Lifecycle"] == "AVAILABLE":
            break
        time.sleep(0.1)

    def problems(network: dict[str, str], fsx: dict[str, str]) -> dict[str, list[str]]:
        spec = spec_file(
            tmp_path,
            "online-existing",
            network={"availabilityZone": "us-west-2a", "apiCidrs": [], **network},
            storage={"fsxLustre": fsx},
        )
        validation = load_and_validate(str(spec))
        assert validation.resolved is not None, validation.problems
        found = online_problems(sandbox.aws(region), validation.resolved, load_catalog())
        out: dict[str, list[str]] = {}
        for p in found:
            if p.code.startswith("existing-"):
                out.setdefault(".".join(map(str, p.path)), []).append(p.message)
        return out

    bad = problems(
        {"vpcId": vpc, "subnetId": wrong_az, "secondarySubnetId": same_az},
        {"fileSystemId": fs},
    )
    assert bad["network.subnetId"] == [f"{wrong_az} is in us-west-2c, not in us-west-2a"]
    assert "the nodes' own AZ" in bad["network.secondarySubnetId"][0]
    assert bad["storage.fsxLustre.fileSystemId"] == [f"{fs} is in {other}, not in {vpc}"]

    foreign_subnet = problems(
        {"vpcId": vpc, "subnetId": foreign, "secondarySubnetId": second}, {"fileSystemId": fs}
    )
    assert foreign_subnet["network.subnetId"] == [f"{foreign} is in {other}, not in {vpc}"]

    missing = problems(
        {"vpcId": "vpc-0123456789abcdef0", "subnetId": same_az, "secondarySubnetId": second},
        {"fileSystemId": "fs-0123456789abcdef0"},
    )
    assert missing["network.vpcId"] == ["vpc-0123456789abcdef0 does not exist in us-west-2"]
    assert "fs-0123456789abcdef0 does not exist" in missing["storage.fsxLustre.fileSystemId"][0]

    where = {"vpcId": other, "subnetId": foreign, "secondarySubnetId": foreign_second}
    (shut,) = problems(where, {"fileSystemId": fs})["storage.fsxLustre.fileSystemId"]
    assert shut == (
        f"{fs}'s security groups ({group}) let no Lustre traffic in from the nodes' subnet "
        "10.79.0.0/20 (TCP 1018-1023): every mount would hang"
    )
    ec2.authorize_security_group_ingress(
        GroupId=group,
        IpPermissions=[
            {
                "IpProtocol": "tcp",
                "FromPort": 1018,
                "ToPort": 1023,
                "IpRanges": [{"CidrIp": "10.79.0.0/20"}],
            }
        ],
    )
    fits = problems(where, {"fileSystemId": fs})
    assert fits == {}


def test_a_control_plane_log_group_left_by_another_cluster_is_refused(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """An untagged /aws/eks/NAME/cluster with no EKS cluster of fmctl's behind it holds an
    earlier cluster's logs: refused before anything is made, never adopted or deleted. One
    tagged as this cluster's is fmctl's own."""
    spec = spec_file(tmp_path, "online-logs")
    region = region_of(spec)
    logs = sandbox.aws(region).client("logs")
    group = "/aws/eks/online-logs/cluster"
    logs.create_log_group(logGroupName=group)
    try:
        message, path = _problems(sandbox, spec)["log-group-foreign"]
        assert "an earlier EKS cluster named online-logs" in message and path == "metadata.name"
        arn = logs.describe_log_groups(logGroupNamePrefix=group)["logGroups"][0]["logGroupArn"]
        logs.tag_resource(resourceArn=arn, tags={"fmctl.dev/cluster": "someone-else"})
        message, _ = _problems(sandbox, spec)["log-group-foreign"]
        assert "fmctl cluster someone-else" in message
        logs.tag_resource(resourceArn=arn, tags={"fmctl.dev/cluster": "online-logs"})
        assert "log-group-foreign" not in _problems(sandbox, spec)
    finally:
        logs.delete_log_group(logGroupName=group)


def test_an_availability_zone_the_account_lacks_is_refused(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """us-west-1c is a zone of the region (some accounts have it: AWS maps its zones to
    letters per account), so it passes offline; this account (the sandbox's, as moto
    records one: us-west-1a and 1b) has none: said at the zone's line, and nothing else is
    judged there. A letter no account has (us-west-2z) never gets this far."""
    spec = spec_file(tmp_path, "online-zone")
    data = yaml.safe_load(spec.read_text())
    data["metadata"]["region"] = "us-west-1"
    data["network"]["availabilityZone"] = "us-west-1c"
    spec.write_text(yaml.safe_dump(data))
    problems = _problems(sandbox, spec)
    assert problems["az-missing"] == (
        "us-west-1 has no availability zone us-west-1c in this account",
        "network.availabilityZone",
    ), problems
    assert [p for p in problems if p.startswith("az-")] == ["az-missing"]
    data["metadata"]["region"] = "us-west-2"
    data["network"]["availabilityZone"] = "us-west-2z"
    spec.write_text(yaml.safe_dump(data))
    offline = load_and_validate(str(spec))
    (problem,) = [p for p in offline.problems if p.code == "az-region"]
    assert "us-west-2 has no availability zone 'us-west-2z'" in problem.message
    assert "us-west-2a, us-west-2b, us-west-2c, us-west-2d" in problem.message


def test_the_head_nodes_key_pair_must_exist(sandbox: Sandbox, tmp_path: Path) -> None:
    from tests.conftest import ROOT

    data = yaml.safe_load((ROOT / "examples" / "p5-slurm-capacity-block.yaml").read_text())
    data["metadata"]["name"] = "online-key"
    data["compute"]["headNode"]["keyName"] = "fmctl-test-ops"
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    ec2 = sandbox.aws(data["metadata"]["region"]).client("ec2")
    message, path = _problems(sandbox, spec)["key-pair-missing"]
    assert "no key pair 'fmctl-test-ops'" in message and path == "compute.headNode.keyName"
    ec2.create_key_pair(KeyName="fmctl-test-ops")
    try:
        assert "key-pair-missing" not in _problems(sandbox, spec)
    finally:
        ec2.delete_key_pair(KeyName="fmctl-test-ops")


def test_a_zone_that_does_not_offer_the_type_names_the_ones_that_do(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """p5en.48xlarge on demand in us-west-2b, which (as moto records EC2's offerings) does
    not sell it: the error is at the pool's type, and the hint lists the region's zones that
    offer it (DescribeInstanceTypeOfferings by zone)."""
    spec = spec_file(tmp_path, "online-offer")  # p5en on EKS, us-west-2
    data = yaml.safe_load(spec.read_text())
    data["network"]["availabilityZone"] = "us-west-2b"
    spec.write_text(yaml.safe_dump(data))
    validation = load_and_validate(str(spec))
    assert validation.resolved is not None
    found = online_problems(sandbox.aws("us-west-2"), validation.resolved, load_catalog())
    (offer,) = [p for p in found if p.code == "az-offering"]
    assert offer.message == "us-west-2b does not offer p5en.48xlarge"
    assert offer.hint == "zones of us-west-2 that offer it: us-west-2a, us-west-2c, us-west-2d"


def test_init_names_a_zone_that_offers_the_type(sandbox: Sandbox) -> None:
    """Asked (here the sandbox, whose EC2 offers p6-b200 only in us-east-1c, as moto records
    EC2's offerings), `init` names that zone and says it asked; offline, the region's first
    zone, said to be unchecked."""
    args = ("init", "--scheduler", "slurm", "--instance-type", "p6-b200.48xlarge")
    asked = sandbox.fmctl(*args, "--region", "us-east-1", "--sandbox")
    assert asked.returncode == 0, asked.stderr
    data = yaml.safe_load(asked.stdout)
    assert data["network"]["availabilityZone"] == "us-east-1c"
    assert "us-east-1c: offers p6-b200.48xlarge (EC2's offerings, asked now)" in asked.stdout
    offline = sandbox.fmctl(*args, "--region", "us-east-1", "--offline")
    assert yaml.safe_load(offline.stdout)["network"]["availabilityZone"] == "us-east-1a"
    assert "not checked (--offline)" in offline.stdout


@pytest.mark.parametrize(
    ("minutes", "code", "said"),
    [
        (30, "block-ending", "minutes: fmctl launches nothing into a block in its last 60"),
        (-5, "block-ended", "nothing launches into it any more"),
        (24 * 60, None, ""),
    ],
)
def test_a_capacity_block_near_its_end_is_refused(
    sandbox: Sandbox, tmp_path: Path, minutes: int, code: str | None, said: str
) -> None:
    """A Capacity Block in its last hour (or past its end, while EC2 still calls it active) is
    refused at the pool's reservation: a node launched into it would be drained at once. A
    day left is fine."""
    import time

    rid = f"cr-0eeeeeeeeeeeee{abs(minutes):03d}"[:20]
    spec = spec_file(tmp_path, f"block-{abs(minutes)}")
    data = yaml.safe_load(spec.read_text())
    pool = data["compute"]["gpuPools"][0]
    pool["capacity"] = {"type": "capacity-block", "reservationId": rid}
    spec.write_text(yaml.safe_dump(data))
    stamp = "%Y-%m-%dT%H:%M:%S.000Z"
    sandbox.seed(
        {
            "capacityReservationId": rid,
            "instanceType": pool["instanceType"],
            "availabilityZone": data["network"]["availabilityZone"],
            "totalInstanceCount": pool["count"],
            "availableInstanceCount": pool["count"],
            "state": "active",
            "reservationType": "capacity-block",
            "startDate": time.strftime(stamp, time.gmtime(time.time() - 86400)),
            "endDate": time.strftime(stamp, time.gmtime(time.time() + minutes * 60)),
        }
    )
    found = _problems(sandbox, spec)
    if code is None:
        assert not {"block-ending", "block-ended"} & set(found), found
        return
    message, path = found[code]
    assert said in message and rid in message, message
    assert path == "compute.gpuPools.0.capacity.reservationId"


def test_status_shows_each_capacity_blocks_time_left(sandbox: Sandbox, tmp_path: Path) -> None:
    """`status` reads the end of each Capacity Block the applied spec names (the sandbox
    seeds a block with EC2's window: 14 days from now) and says how long it has left."""
    import json

    from tests.engine.test_pcs import pcs_spec

    name, region, rid = "block-left", "us-east-2", "cr-0fbf0bf0bf0bf0bf0"
    spec = pcs_spec(
        tmp_path,
        name,
        region,
        instanceType="p5.48xlarge",
        capacity={"type": "capacity-block", "reservationId": rid},
    )
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        seen = sandbox.fmctl("status", name, "--region", region, "--sandbox", "-o", "json")
        (block,) = json.loads(seen.stdout)["capacityBlocks"]
        assert block["pool"] == "train" and block["reservationId"] == rid
        assert 14 * 86400 - 600 < block["secondsLeft"] <= 14 * 86400, block
        text = sandbox.fmctl("status", name, "--region", region, "--sandbox").stdout
        assert f"capacity block {rid} (pool train, active): ends {block['ends']}, 13d 23h" in text
    finally:
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
