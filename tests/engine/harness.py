"""The e2e harness: one sandbox emulator per session, the real `fmctl` as a process (forked
from a server that has imported it once, tests/tools/zygote.py), and views of the
emulator's state (what a cluster owns, duplicates, the request log)."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fmctl_sandbox import daemon, server
from provisioner.drivers.aws import Aws
from provisioner.drivers.kube import KubeClient
from provisioner.resources.context import Context
from provisioner.resources.tags import OWNER_TAG, RETAINED_TAG
from tests.tools import sandbox_doubles as doubles
from tests.tools import zygote

ROOT = Path(__file__).resolve().parents[2]
#: Documented durations x this: FSx's 10 minutes take 1.2 s.
SCALE = 0.002
#: The product token of the tests' own clients (fmctl's own are ``fmctl/VERSION``).
HARNESS_AGENT = "fmctl-tests/harness"


@dataclass
class Sandbox:
    """A running emulator and the FMCTL_HOME that points at it."""

    home: Path
    info: dict[str, Any]
    clients: dict[str, Aws] = field(default_factory=dict, repr=False)
    #: The request log read so far, and how much of it is final (``requests``).
    log: list[dict[str, Any]] = field(default_factory=list, repr=False)
    stable: int = 0
    #: How much of the log the permission check has read (tests/engine/conftest.py).
    checked: int = 0

    @property
    def endpoint(self) -> str:
        return f"https://127.0.0.1:{self.info['port']}"

    @property
    def credentials(self) -> tuple[str, str]:
        creds = daemon.credentials(self.home)
        return creds.access_key, creds.secret_key

    def aws(self, region: str) -> Aws:
        """Clients of the emulator in ``region``: one ``Aws`` per region, whose clients are
        made once (a botocore client takes tens of milliseconds to make)."""
        if region not in self.clients:
            self.clients[region] = Aws(
                region,
                self.endpoint,
                sandbox=True,
                ca_bundle=self.info["ca"],
                credentials=self.credentials,
                # Not fmctl's own calls: the permission check (tests/permissions.py) counts
                # only those.
                agent=HARNESS_AGENT,
            )
        return self.clients[region]

    def requests(self) -> list[dict[str, Any]]:
        """The emulator's request log. Read incrementally: a worker's log grows to tens of
        thousands of calls, and tests ask for it often (some in polling loops). Entries
        whose answer is not in yet (status 0) may still change, so the next read starts
        again from the first of them; a log shorter than what was read (a restarted
        emulator) is read again whole."""
        got = doubles.control(self.home, f"/_fmctl/requests?since={self.stable}")
        if got["total"] < self.stable:
            self.stable, self.log = 0, []
            got = doubles.control(self.home, "/_fmctl/requests?since=0")
        self.log[self.stable :] = got["entries"]
        while self.stable < len(self.log) and (
            self.log[self.stable]["status"] or self.log[self.stable]["fault"] == "reset"
        ):
            self.stable += 1
        return list(self.log)

    def log_size(self) -> int:
        """How far the emulator's log has got (for ``failures``)."""
        log = self.home / "sandbox" / "server.log"
        return log.stat().st_size if log.exists() else 0

    def failures(self, since: int) -> list[str]:
        """The emulator's own failures logged after offset ``since``: a request it could not
        handle (its internal error) or one werkzeug had to answer for it. Either is a bug in
        the sandbox, which would reach fmctl as a 500 no retry cures."""
        with open(self.home / "sandbox" / "server.log", "rb") as fh:
            fh.seek(since)
            text = fh.read().decode(errors="replace")
        found, lines = [], text.splitlines()
        for i, line in enumerate(lines):
            if line.startswith((server.INTERNAL_ERROR, "Error on request")):
                found.append("\n".join(lines[i : i + 40]))
        return found

    def faults(self, rules: list[dict[str, Any]]) -> None:
        doubles.control(self.home, "/_fmctl/faults", {"rules": rules})

    def pcs_hold(self, cluster_id: str, hold: bool) -> None:
        """Keep a PCS cluster Creating until released (``hold`` False lets it land now)."""
        done = doubles.control(self.home, "/_fmctl/pcs/hold", {"id": cluster_id, "hold": hold})
        assert done["held"] is hold, f"no PCS cluster {cluster_id} in the sandbox"

    def node_tools(self, path: Path | None) -> None:
        """The folder the nodes' pods and Run Command scripts find their tools in."""
        doubles.control(self.home, "/_fmctl/seed/node-tools", {"path": path and str(path)})

    def advance(self, seconds: float) -> list[dict[str, Any]]:
        """Move EventBridge Scheduler's clock on; what each schedule then due did."""
        said = daemon.call(
            self.info, daemon.credentials(self.home), "AdvanceClock", {"seconds": seconds}
        )
        runs: list[dict[str, Any]] = said["runs"]
        return runs

    def clock(self) -> float:
        """The sandbox's time (epoch seconds): the wall clock plus every advance so far,
        which the emulator's schedules and EC2's events go by."""
        said = daemon.call(self.info, daemon.credentials(self.home), "AdvanceClock", {"seconds": 0})
        return float(said["now"])

    def spend(self, cluster: str, region: str, amount: float) -> list[dict[str, Any]]:
        """Set the actual spend of the cluster's budget; what its notifications sent."""
        said = daemon.call(
            self.info,
            daemon.credentials(self.home),
            "SetBudgetSpend",
            {"BudgetName": f"fmctl-{cluster}-{region}", "Amount": amount},
        )
        sent: list[dict[str, Any]] = said["sent"]
        return sent

    def seed(self, reservation: dict[str, Any]) -> None:
        """A capacity reservation in the region of its availability zone, as `up` seeds one."""
        region = str(reservation["availabilityZone"])[:-1]
        daemon.call(
            self.info, daemon.credentials(self.home), "SeedCapacityReservation", reservation, region
        )

    def env(self, **extra: str) -> dict[str, str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        return {
            **clean,
            "FMCTL_HOME": str(self.home),
            "AWS_EC2_METADATA_DISABLED": "true",
            # A run that dies of a signal (a segfault seen once in CI) prints where it was.
            "PYTHONFAULTHANDLER": "1",
            **extra,
        }

    def fmctl(
        self, *args: str, timeout: float = 180, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """`fmctl ARGS` as a process (forked from tests/tools/zygote.py's preloaded server
        unless FMCTL_TEST_FORK=0), its output captured."""
        if zygote.enabled():
            return zygote.run(args, self.env(**env), ROOT, timeout)
        return subprocess.run(
            [sys.executable, "-m", "provisioner", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=self.env(**env),
            timeout=timeout,
            check=False,
        )

    def spawn(self, *args: str, **env: str) -> subprocess.Popen[str]:
        """`fmctl ARGS` started, stdout and stderr on one pipe (forked, as ``fmctl``)."""
        if zygote.enabled():
            forked = zygote.Forked(args, self.env(**env), ROOT, subprocess.PIPE, subprocess.STDOUT)
            return forked  # type: ignore[return-value]  # Popen's interface, as the tests use it
        return subprocess.Popen(
            [sys.executable, "-m", "provisioner", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
            env=self.env(**env),
            # A test run started in the background of a shell ignores SIGINT, and a child
            # inherits that: fmctl would never see the Ctrl-C a test sends it.
            preexec_fn=_default_sigint,
        )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(home: Path) -> Sandbox:
    os.environ["FMCTL_SANDBOX_SCALE"] = str(SCALE)
    return Sandbox(home, doubles.start(home, SCALE))


def subnets(sandbox: Sandbox, region: str, octet: int) -> list[str]:
    """A new VPC 10.OCTET.0.0/16 in ``region`` and a subnet in each of its first two zones
    (what an EKS cluster asks for)."""
    ec2 = sandbox.aws(region).client("ec2")
    vpc = ec2.create_vpc(CidrBlock=f"10.{octet}.0.0/16")["Vpc"]["VpcId"]
    return [
        ec2.create_subnet(
            VpcId=vpc, CidrBlock=f"10.{octet}.{i}.0/24", AvailabilityZone=f"{region}{zone}"
        )["Subnet"]["SubnetId"]
        for i, zone in enumerate("ab")
    ]


def spec_file(tmp: Path, name: str, example: str = "p5en-eks-fsx-s3.yaml", **changes: Any) -> Path:
    """An example spec renamed to ``name`` (and other top-level sections changed)."""
    data = yaml.safe_load((ROOT / "examples" / example).read_text())
    data["metadata"]["name"] = name
    for key, value in changes.items():
        data[key] = value
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def fmctl_calls(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The calls among the request log's ``entries`` that fmctl made, not the programs that
    run in a sandbox cluster as its pods would (fmctl's node agents, which report on their
    nodes whenever they look, and its verify controller): their Kubernetes calls carry no
    fmctl User-Agent, which fmctl's own client always sends (provisioner/drivers/kube.py)."""
    return [e for e in entries if not (e["service"] == "kubernetes" and e.get("agent") is None)]


def region_of(path: Path) -> str:
    return str(yaml.safe_load(path.read_text())["metadata"]["region"])


def owned(
    sandbox: Sandbox, name: str, region: str, unseen_ok: bool = False
) -> list[tuple[str, str, str]]:
    """(kind, logical id, AWS id) of everything tagged as the cluster's. A kind that could
    not look (the cluster's Kubernetes API did not answer: its charts go unlisted, as
    `down` wants) is asked again, and a test is failed with why rather than told the
    charts are not there: "not seen" is not "not made". The sandbox under a full campaign
    once left a chart unlisted that the re-run had made. ``unseen_ok``: the test made the
    API unreachable itself, and what the listing still finds is what it wants."""
    from provisioner.ops.planner import find_owned
    from provisioner.ops.target import Event

    unseen: list[str] = []
    for _ in range(OWNED_TRIES):
        unseen.clear()

        def note(event: Event) -> None:
            if event.state == "note":
                unseen.append(f"{event.resource}: {event.detail}")

        ctx = Context(aws=sandbox.aws(region), cluster=name, region=region, on_event=note)
        found = sorted((f.kind, f.resource, f.id) for f in find_owned(ctx))
        if not unseen or unseen_ok:
            return found
        time.sleep(2)
    raise AssertionError(f"could not list what {name} owns: {unseen}")


#: How many times ``owned`` asks when a kind could not look.
OWNED_TRIES = 3


def duplicates(items: list[tuple[str, str, str]]) -> dict[tuple[str, str], int]:
    """Logical ids that exist more than once."""
    counts = collections.Counter((kind, logical) for kind, logical, _ in items)
    return {key: n for key, n in counts.items() if n > 1}


def raw_leftovers(sandbox: Sandbox, name: str, region: str) -> list[str]:
    """Anything in any service still carrying the cluster's tag (independent of find_owned)."""
    aws = sandbox.aws(region)
    ec2 = aws.client("ec2")
    mine = [{"Name": f"tag:{OWNER_TAG}", "Values": [name]}]
    left: list[str] = []
    # Per-type listings: moto's DescribeTags still reports tags of deleted resources.
    for call, key, ident in (
        ("describe_vpcs", "Vpcs", "VpcId"),
        ("describe_subnets", "Subnets", "SubnetId"),
        ("describe_security_groups", "SecurityGroups", "GroupId"),
        ("describe_internet_gateways", "InternetGateways", "InternetGatewayId"),
        ("describe_route_tables", "RouteTables", "RouteTableId"),
        ("describe_addresses", "Addresses", "AllocationId"),
        ("describe_vpc_endpoints", "VpcEndpoints", "VpcEndpointId"),
        ("describe_nat_gateways", "NatGateways", "NatGatewayId"),
        ("describe_placement_groups", "PlacementGroups", "GroupName"),
        ("describe_launch_templates", "LaunchTemplates", "LaunchTemplateId"),
    ):
        left += [
            f"{call}:{i[ident]}"
            for i in getattr(ec2, call)(Filters=mine)[key]
            if str(i.get("State", "")).lower() != "deleted"
            # moto ignores tag filters on some calls (NAT gateways): check the tags too
            and {t["Key"]: t["Value"] for t in i.get("Tags", [])}.get(OWNER_TAG) == name
        ]
    fsx = aws.client("fsx")
    for fs in fsx.describe_file_systems()["FileSystems"]:
        if {t["Key"]: t["Value"] for t in fs.get("Tags", [])}.get(OWNER_TAG) == name:
            left.append(f"fsx:{fs['FileSystemId']}")
    for assoc in fsx.describe_data_repository_associations()["Associations"]:
        if {t["Key"]: t["Value"] for t in assoc.get("Tags", [])}.get(OWNER_TAG) == name:
            left.append(f"dra:{assoc['AssociationId']}")
    left += _eks_leftovers(aws, name)
    left += _pcs_leftovers(aws, name)
    scheduler = aws.client("scheduler")
    for group in scheduler.list_schedule_groups(NamePrefix=f"fmctl-{name}")["ScheduleGroups"]:
        tags = scheduler.list_tags_for_resource(ResourceArn=group["Arn"])["Tags"]
        if {t["Key"]: t["Value"] for t in tags}.get(OWNER_TAG) == name:
            left.append(f"schedule-group:{group['Name']}")
    left += _money_leftovers(aws, name)
    for reservation in ec2.describe_instances(Filters=mine)["Reservations"]:
        left += [
            f"instance:{i['InstanceId']}"
            for i in reservation["Instances"]
            if i["State"]["Name"] not in ("terminated", "shutting-down")
        ]
    # Log groups tagged as the cluster's, and EKS's control-plane group tagged or not (EKS
    # makes it untagged when fmctl has not): only one `down --keep-logs` released stays.
    logs = aws.client("logs")
    for group in logs.describe_log_groups(logGroupNamePrefix=f"/aws/eks/{name}/")["logGroups"]:
        tags = logs.list_tags_for_resource(resourceArn=group["logGroupArn"])["tags"]
        eks_own = group["logGroupName"] == f"/aws/eks/{name}/cluster"
        if (tags.get(OWNER_TAG) == name or eks_own) and RETAINED_TAG not in tags:
            left.append(f"logs:{group['logGroupName']}")
    iam = aws.client("iam")
    prefix = f"fmctl-{name}-{region}-"
    left += [
        f"iam:{r['RoleName']}"
        for r in iam.list_roles()["Roles"]
        if r["RoleName"].startswith(prefix)
    ]
    left += [
        f"instance-profile:{p['InstanceProfileName']}"
        for p in iam.list_instance_profiles()["InstanceProfiles"]
        if p["InstanceProfileName"].startswith(prefix)
    ]
    left += [
        f"iam-policy:{p['PolicyName']}"
        for p in iam.list_policies(Scope="Local")["Policies"]
        if p["PolicyName"].startswith(prefix)
    ]
    s3 = aws.client("s3")
    left += [
        f"s3:{b['Name']}"
        for b in s3.list_buckets()["Buckets"]
        if b["Name"].startswith(f"fmctl-{name}-")
        # Bucket names are global; one in another region is that region's.
        and (s3.get_bucket_location(Bucket=b["Name"])["LocationConstraint"] or "us-east-1")
        == region
    ]
    return left


def _money_leftovers(aws: Aws, name: str) -> list[str]:
    """The budget, and its stop chain: topic, subscriptions, function, log group."""
    left: list[str] = []
    account = aws.client("sts").get_caller_identity()["Account"]
    budgets = aws.client("budgets").describe_budgets(AccountId=account).get("Budgets", [])
    left += [
        f"budget:{b['BudgetName']}"
        for b in budgets
        if b["BudgetName"] == f"fmctl-{name}-{aws.region}"
    ]
    sns = aws.client("sns")
    for topic in sns.list_topics()["Topics"]:
        found = _unless_gone(sns.list_tags_for_resource, ResourceArn=topic["TopicArn"])
        tags = (found or {}).get("Tags", [])
        if {t["Key"]: t["Value"] for t in tags}.get(OWNER_TAG) == name:
            left.append(f"sns:{topic['TopicArn']}")
    lam = aws.client("lambda")
    for function in lam.list_functions()["Functions"]:
        found = _unless_gone(lam.list_tags, Resource=function["FunctionArn"])
        if (found or {}).get("Tags", {}).get(OWNER_TAG) == name:
            left.append(f"lambda:{function['FunctionName']}")
    left += [
        f"subscription:{s['SubscriptionArn']}"
        for s in sns.list_subscriptions()["Subscriptions"]
        if f":function:fmctl-{name}-" in s["Endpoint"]
    ]
    logs = aws.client("logs")
    groups = logs.describe_log_groups(logGroupNamePrefix=f"/aws/lambda/fmctl-{name}-")
    left += [f"logs:{g['logGroupName']}" for g in groups["logGroups"]]
    # The Capacity Blocks' warning rules (their schedule group is the scheduler's, above).
    events = aws.client("events")
    for rule in events.list_rules(NamePrefix=f"fmctl-{name}-")["Rules"]:
        found = _unless_gone(events.list_tags_for_resource, ResourceARN=rule["Arn"])
        tags = (found or {}).get("Tags", [])
        if {t["Key"]: t["Value"] for t in tags}.get(OWNER_TAG) == name:
            left.append(f"events:{rule['Name']}")
    return left


def _unless_gone(read: Any, **params: Any) -> dict[str, Any] | None:
    """A tags read of a listed resource, None when it went between the list and the read:
    another test's cluster, deleted by that test's `down` running alongside (the crash
    campaigns run several at once), is no leftover of this one's."""
    from botocore.exceptions import ClientError

    try:
        found: dict[str, Any] = read(**params)
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code")
        if code in ("ResourceNotFoundException", "ResourceNotFound", "NotFound"):
            return None
        raise
    return found


def _pcs_leftovers(aws: Aws, name: str) -> list[str]:
    """PCS clusters tagged as the cluster's, with their node groups and queues."""
    pcs = aws.client("pcs")
    left: list[str] = []
    for cluster in pcs.list_clusters()["clusters"]:
        try:
            tags = pcs.list_tags_for_resource(resourceArn=cluster["arn"])["tags"]
        except pcs.exceptions.ResourceNotFoundException:
            continue  # deleted between the list and the read (another test's)
        if tags.get(OWNER_TAG) != name:
            continue
        left.append(f"pcs:{cluster['id']}")
        ident = cluster["id"]
        groups = pcs.list_compute_node_groups(clusterIdentifier=ident)["computeNodeGroups"]
        left += [f"pcs-node-group:{g['id']}" for g in groups]
        left += [f"pcs-queue:{q['id']}" for q in pcs.list_queues(clusterIdentifier=ident)["queues"]]
    return left


def _eks_leftovers(aws: Aws, name: str) -> list[str]:
    """The EKS cluster (with its node groups, add-ons and Pod Identity associations) and usable
    KMS keys tagged as the
    cluster's; a key pending deletion is gone as far as billing and use go."""
    left: list[str] = []
    eks = aws.client("eks")
    if name in eks.list_clusters()["clusters"]:
        left.append(f"eks:{name}")
        left += [f"nodegroup:{g}" for g in eks.list_nodegroups(clusterName=name)["nodegroups"]]
        left += [f"addon:{a}" for a in eks.list_addons(clusterName=name)["addons"]]
        left += [
            f"pod-identity:{a['associationId']}"
            for a in eks.list_pod_identity_associations(clusterName=name)["associations"]
        ]
    kms = aws.client("kms")
    tagged = aws.client("resourcegroupstaggingapi").get_resources(
        TagFilters=[{"Key": OWNER_TAG, "Values": [name]}], ResourceTypeFilters=["kms:key"]
    )["ResourceTagMappingList"]
    for item in tagged:
        meta = kms.describe_key(KeyId=item["ResourceARN"])["KeyMetadata"]
        if meta["KeyState"] != "PendingDeletion":
            left.append(f"kms:{meta['KeyId']}")
    return left


def kill_after(proc: subprocess.Popen[str], marker: str, count: int) -> list[str]:
    """SIGKILL ``proc`` once ``count`` output lines contain ``marker``; its output so far."""
    seen, lines = 0, []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if marker in line:
            seen += 1
            if seen >= count:
                proc.send_signal(signal.SIGKILL)
                break
    proc.wait(timeout=60)
    return lines


def created_calls(requests: list[dict[str, Any]]) -> list[str]:
    return [
        r["action"]
        for r in requests
        if r["action"].startswith(("Create", "Allocate")) or r["action"].startswith("PUT /fmctl-")
    ]


def dump(data: Any) -> str:
    return json.dumps(data, indent=1, default=str)


def kube_client(sandbox: Sandbox, name: str, region: str, manager: str = "someone") -> KubeClient:
    """A sandbox EKS cluster's API as another client than fmctl (field manager ``manager``)."""
    from provisioner.drivers.eks_auth import token

    aws = sandbox.aws(region)
    cluster = aws.client("eks").describe_cluster(name=name)["cluster"]
    return KubeClient.for_eks(
        cluster["endpoint"],
        cluster["certificateAuthority"]["data"],
        lambda: token(aws, name),
        manager,
    )


def head_node_instance(sandbox: Sandbox, region: str, name: str, cidr: str) -> str:
    """What ParallelCluster makes for cluster ``name``: a running head node with the tags
    it puts on it (in a VPC of block ``cidr`` of its own)."""
    ec2 = sandbox.aws(region).client("ec2")
    vpc = ec2.create_vpc(CidrBlock=cidr)["Vpc"]["VpcId"]
    subnet_cidr = cidr.replace("/16", "/24")
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=subnet_cidr)["Subnet"]["SubnetId"]
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    tags = [
        {"Key": "parallelcluster:cluster-name", "Value": name},
        {"Key": "parallelcluster:node-type", "Value": "HeadNode"},
    ]
    made = ec2.run_instances(
        ImageId=image,
        MinCount=1,
        MaxCount=1,
        InstanceType="m7i.4xlarge",
        SubnetId=subnet,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    return str(made["Instances"][0]["InstanceId"])


def until(what: str, probe: Any, seconds: float = 30.0, every: float = 0.2) -> Any:
    """What ``probe`` returns once it is truthy; an AssertionError naming ``what`` when it
    is not within ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        found = probe()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def quick_torchrun(sandbox: Sandbox, tmp: Path) -> None:
    """Node tools whose torchrun ends at once (the sandbox has no GPUs)."""
    folder = tmp / "tools"
    folder.mkdir()
    torchrun = folder / "torchrun"
    torchrun.write_text("#!/bin/sh\nexit 0\n")
    torchrun.chmod(0o755)
    sandbox.node_tools(folder)
