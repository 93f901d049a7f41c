"""ParallelCluster's own compute-fleet daemon, clustermgtd, running a stand-in Slurm cluster's
static nodes against the sandbox's EC2 and DynamoDB: what replaces a node fmctl's agent
drains on ParallelCluster, tested as it is rather than as fmctl's README says it is.

clustermgtd is aws-parallelcluster-node at the version of the pinned CLI (installed in
.venv-pcluster beside it, `make tools`), run as the head node runs it, with the files
ParallelCluster gives it (clustermgtd_daemon.py). In the emulator, as the CLI's stacks make
them: the launch template ``CLUSTER-QUEUE-COMPUTERESOURCE`` with the instance tags
queues_stack.py gives it and InstanceInitiatedShutdownBehavior terminate; the
``parallelcluster-slurm-CLUSTER`` table (key Id, index InstanceId: slurm_builder.py), where
clustermgtd records which instance backs which node; the fleet's status item
(``parallelcluster-CLUSTER``, RUNNING).

What a new instance does is ParallelCluster's compute bootstrap, in order (the CLI's
compute_node/user_data.sh and the cookbook's recipes): it finds its Slurm name in that table
by its instance id (helpers.rb dynamodb_info), runs OnNodeConfigured (fmctl's verify gate:
``verify-node.sh``, as on-node-configured.sh runs it), then starts slurmd and resumes the
node (finalize_compute.rb: ``scontrol update nodename=NAME state=resume reason='Node start
up'``). A bootstrap that fails runs ``shutdown -h now`` (user_data.sh's error_exit), which
the launch template's shutdown behaviour turns into the instance's termination.

Deviations, each because this machine is one machine: clustermgtd's loop is ``loop_time``
seconds instead of 60 (a config key it reads); the subnet is 127.0.0.0/16 so that each
instance's private address is one of this machine's loopback addresses (slurmd listens on
all of them); the cluster has no Route 53 zone (``hosted_zone`` empty: clustermgtd then
updates no DNS records) and each node's hostname is its Slurm name, as ParallelCluster's
managed DNS names it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.tools.standin import clustermgtd_daemon, recorded
from tests.tools.standin.clustermgtd_daemon import PCLUSTER_PY
from tests.tools.standin.node import CLOUD_INIT_ENV, SSM_ENV, StandinNode
from tests.tools.standin.slurm import ComputeNode, StandinSlurm

ROOT = Path(__file__).resolve().parents[3]
REGION = "us-east-1"
INSTANCE_TYPE = "p5.48xlarge"
#: fmctl's OnNodeConfigured gate, as on-node-configured.sh runs it.
GATE = "/opt/fmctl/slurm/lib/verify-node.sh"
#: ParallelCluster's slurm.conf sets RebootProgram=/sbin/reboot (the cookbook's
#: slurm.conf.erb); the stand-in's asks the harness to reboot the node (below).
REBOOT_PROGRAM = "/usr/local/sbin/standin-reboot"
REBOOT_ASKED = "/var/lib/standin-reboot-asked"
#: The stand-in's kernel log (tests/tools/standin/bin/journalctl).
KERNEL_LOG = "/etc/standin/kernel.log"


NODE_ENV = (
    "FMCTL_EFA_ENABLED=true\nFMCTL_EXPECTED_GPUS=8\nFMCTL_EXPECTED_EFA=32\n"
    "FMCTL_EFA_RDMA_READ=true\nFMCTL_IMEX=false\n"
)


def p5_instance(node: StandinNode, health_env: str, gpus_missing: int = 0) -> None:
    """A new p5.48xlarge as `up` and the AMI leave it: fmctl's files and the spec's health
    settings, the example's storage mounted (a tmpfs for each), and the recorded p5 tools'
    answers (``gpus_missing`` GPUs off the bus)."""
    data = ROOT / "tests/data/check"
    shutil.copytree(ROOT / "slurm", node.path("/opt/fmctl/slurm"), dirs_exist_ok=True)
    node.write("/opt/fmctl/slurm/health.env", health_env)
    node.write("/etc/fmctl/node.env", NODE_ENV)
    node.path("/var/lib/fmctl-efa").mkdir(parents=True, exist_ok=True)
    for path in ("/fsx", "/scratch"):
        node.run(["mkdir", "-p", path], env=SSM_ENV)
        node.run(["mount", "-t", "tmpfs", "tmpfs", path], env=SSM_ENV)
    gpus = (data / "nvidia-smi-healthy.csv").read_text().splitlines()
    node.write("/etc/standin/nvidia-smi.csv", "\n".join(gpus[: len(gpus) - gpus_missing]) + "\n")
    node.write("/etc/standin/fi_info.txt", recorded.fi_info(recorded.p5_domains(32), 2))
    node.write("/etc/standin/dcgmi-diag.json", (data / "dcgmi-diag-healthy.json").read_text())


def required() -> None:
    """Skip (fail in CI) without clustermgtd in .venv-pcluster."""
    done = (
        subprocess.run(
            [str(PCLUSTER_PY), "-c", "import slurm_plugin.clustermgtd"],
            capture_output=True,
            check=False,
        )
        if PCLUSTER_PY.exists()
        else None
    )
    if done is None or done.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail("clustermgtd is missing: `make tools` installs aws-parallelcluster-node")
        pytest.skip("no clustermgtd here (`make tools` installs aws-parallelcluster-node)")


@dataclass
class Boot:
    """One instance's bootstrap as the harness ran it."""

    instance: str
    name: str
    seen: float
    #: When the gate ended, whether it passed, and when the node was resumed.
    gated: float = 0.0
    passed: bool = False
    resumed: float = 0.0
    node: StandinNode | None = None
    #: Each reboot: when slurmd ran RebootProgram, and whether the gate passed after it.
    reboots: list[tuple[float, bool]] = field(default_factory=list)
    rebooting: bool = False


@dataclass
class Emulator:
    """The sandbox's EC2 and DynamoDB, as the cluster's own clients see them."""

    endpoint: str
    ca: str
    credentials: tuple[str, str]

    def client(self, service: str) -> Any:
        key, secret = self.credentials
        return boto3.client(
            service,
            region_name=REGION,
            endpoint_url=self.endpoint,
            verify=self.ca,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
        )

    def env(self) -> dict[str, str]:
        """What clustermgtd's boto3 reads: the emulator and its credentials, nothing else."""
        key, secret = self.credentials
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_CA_BUNDLE": self.ca,
            "AWS_ACCESS_KEY_ID": key,
            "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        }


@dataclass
class Fleet:
    """A ParallelCluster cluster's static nodes of one queue and compute resource, on
    stand-in nodes, with clustermgtd keeping them."""

    emulator: Emulator
    image: Path
    cluster: str
    queue: str
    resource: str
    count: int
    #: Lays a new instance's node out before its bootstrap (fmctl's files, the tools'
    #: answers): called with the node and how many instances have booted before it.
    prepare: Callable[[StandinNode, int], None]
    loop_time: int = 2
    #: How long an instance takes from launch to its bootstrap (EC2's pending state, the
    #: OS boot, the cookbook's init and config recipes), and a reboot to its boot units.
    boot_seconds: float = 0.0
    #: clustermgtd's own fixed waits (the 5 s it sleeps each loop before it lists EC2's
    #: instances, clustermgtd.py _get_ec2_instances) times this, for a benchmark that scales
    #: its loop: 1 runs it untouched.
    wait_scale: float = 1.0
    #: Called with a rebooting node before its boot units run (a fault the reboot leaves).
    on_reboot: Callable[[StandinNode], None] | None = None
    boots: list[Boot] = field(default_factory=list)
    head: StandinNode | None = None
    slurm: StandinSlurm | None = None
    _scratch: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="fmctl-cmgtd-")))
    _daemon: subprocess.Popen[bytes] | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _watcher: threading.Thread | None = None

    @property
    def names(self) -> list[str]:
        return [f"{self.queue}-st-{self.resource}-{i}" for i in range(1, self.count + 1)]

    @property
    def table(self) -> str:
        return f"parallelcluster-slurm-{self.cluster}"

    # -- the cluster's AWS side, as the CLI's stacks make it ------------------------------

    def _aws(self) -> None:
        ec2 = self.emulator.client("ec2")
        vpc = ec2.create_vpc(CidrBlock="127.0.0.0/16")["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="127.0.64.0/20")["Subnet"]["SubnetId"]
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        tags = [
            {"Key": "parallelcluster:cluster-name", "Value": self.cluster},
            {"Key": "parallelcluster:node-type", "Value": "Compute"},
            {"Key": "parallelcluster:queue-name", "Value": self.queue},
            {"Key": "parallelcluster:compute-resource-name", "Value": self.resource},
        ]
        ec2.create_launch_template(
            LaunchTemplateName=f"{self.cluster}-{self.queue}-{self.resource}",
            LaunchTemplateData={
                "ImageId": image,
                "InstanceType": INSTANCE_TYPE,
                "InstanceInitiatedShutdownBehavior": "terminate",
                "MetadataOptions": {"HttpTokens": "required"},
                "NetworkInterfaces": [{"DeviceIndex": 0, "SubnetId": subnet}],
                "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}],
            },
        )
        self.emulator.client("dynamodb").create_table(
            TableName=self.table,
            AttributeDefinitions=[
                {"AttributeName": "Id", "AttributeType": "S"},
                {"AttributeName": "InstanceId", "AttributeType": "S"},
            ],
            KeySchema=[{"AttributeName": "Id", "KeyType": "HASH"}],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "InstanceId",
                    "KeySchema": [{"AttributeName": "InstanceId", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        # The fleet's status table, RUNNING once the head node is configured (the cookbook's
        # fleet_status.rb puts this item).
        db = self.emulator.client("dynamodb")
        db.create_table(
            TableName=f"parallelcluster-{self.cluster}",
            AttributeDefinitions=[{"AttributeName": "Id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "Id", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        db.put_item(
            TableName=f"parallelcluster-{self.cluster}",
            Item={
                "Id": {"S": "COMPUTE_FLEET"},
                "Data": {
                    "M": {
                        "status": {"S": "RUNNING"},
                        "lastStatusUpdatedTime": {"S": time.strftime("%Y-%m-%d %H:%M:%S UTC")},
                    }
                },
            },
        )

    def instances(self, states: tuple[str, ...] = ("pending", "running")) -> list[dict[str, Any]]:
        """The cluster's compute instances in ``states``."""
        pages = self.emulator.client("ec2").describe_instances(
            Filters=[
                {"Name": "tag:parallelcluster:cluster-name", "Values": [self.cluster]},
                {"Name": "instance-state-name", "Values": list(states)},
            ]
        )
        return [i for r in pages["Reservations"] for i in r["Instances"]]

    def backing(self, name: str) -> str:
        """The instance the cluster's table says backs node ``name``."""
        item = self.emulator.client("dynamodb").get_item(
            TableName=self.table, Key={"Id": {"S": name}}
        )
        return str(item["Item"]["InstanceId"]["S"])

    def _name_of(self, instance: str) -> str | None:
        """The node's own lookup at boot (helpers.rb dynamodb_info): the table's index."""
        got = self.emulator.client("dynamodb").query(
            TableName=self.table,
            IndexName="InstanceId",
            KeyConditionExpression="InstanceId = :i",
            ExpressionAttributeValues={":i": {"S": instance}},
        )
        items = got.get("Items") or []
        return str(items[0]["Id"]["S"]) if items else None

    # -- the head node and its Slurm -----------------------------------------------------

    def start(self) -> None:
        """The cluster as clustermgtd finds it once created: each static node backed by an
        instance and registered idle; then clustermgtd itself."""
        self._aws()
        ec2 = self.emulator.client("ec2")
        # The static nodes' first instances, launched as clustermgtd launches them and
        # recorded as it records them (instance_manager.py _store_assigned_hostnames).
        launched = ec2.run_instances(
            MinCount=self.count,
            MaxCount=self.count,
            LaunchTemplate={
                "LaunchTemplateName": f"{self.cluster}-{self.queue}-{self.resource}",
                "Version": "$Latest",
            },
        )["Instances"]
        db = self.emulator.client("dynamodb")
        for name, instance in zip(self.names, launched, strict=True):
            db.put_item(
                TableName=self.table,
                Item={
                    "Id": {"S": name},
                    "InstanceId": {"S": instance["InstanceId"]},
                    "HeadNodePrivateIp": {"S": "127.0.0.1"},
                    "HeadNodeHostname": {"S": "head"},
                },
            )
        self.head = StandinNode(self.image, "head")
        computes = []
        for nth, (name, instance) in enumerate(zip(self.names, launched, strict=True)):
            node = StandinNode(self.image, name, shared_from=self.head, shares=("opt/slurm",))
            self.prepare(node, nth)
            node.write(REBOOT_PROGRAM, f"#!/bin/sh\ntouch {REBOOT_ASKED}\n", 0o755)
            computes.append(
                ComputeNode(node, name, self.queue, 1, 2, 1, addr=instance["PrivateIpAddress"])
            )
            self.boots.append(
                Boot(instance["InstanceId"], name, time.monotonic(), node=node, passed=True)
            )
        # ResumeTimeout: how long Slurm waits for a rebooted node's slurmd before it marks
        # it down ("reboot timed out"); ParallelCluster sets its compute bootstrap timeout
        # (1800 s), the stand-in 40 s so that a test of it is short yet sees clustermgtd
        # loop a few times meanwhile, even on a loaded machine.
        self.slurm = StandinSlurm(
            self.head,
            computes,
            [("RebootProgram", REBOOT_PROGRAM), ("ResumeTimeout", "40")],
        )
        for c, instance in zip(computes, launched, strict=True):
            self._slurmd(c.node, c.name, instance["InstanceId"])
        for c in computes:
            self.slurm.wait_state(c.name, ("IDLE",), timeout=30)
        self._clustermgtd()
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _clustermgtd(self) -> None:
        assert self.head is not None
        self._daemon = clustermgtd_daemon.start(
            clustermgtd_daemon.Settings(
                cluster=self.cluster,
                queue=self.queue,
                resource=self.resource,
                count=self.count,
                instance_type=INSTANCE_TYPE,
                region=REGION,
                table=self.table,
                loop_time=self.loop_time,
                wait_scale=self.wait_scale,
            ),
            self.head,
            self._scratch,
            self.emulator.env(),
        )

    def log(self) -> str:
        """clustermgtd's log so far."""
        path = self._scratch / "clustermgtd.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # -- instances booting and going away -----------------------------------------------

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                self._look()
            except Exception as e:  # a look that failed is retried
                (self._scratch / "watch-errors.log").open("a").write(f"{e!r}\n")
            self._stop.wait(0.2)

    def _look(self) -> None:
        with self._lock:
            known = {b.instance: b for b in self.boots}
        alive = {i["InstanceId"]: i for i in self.instances()}
        for instance, boot in known.items():
            if instance not in alive and boot.node is not None:
                # Terminated (by clustermgtd, or by its own shutdown): the node is gone.
                boot.node.stop()
                boot.node = None
            elif (
                boot.node is not None
                and not boot.rebooting
                and boot.node.path(REBOOT_ASKED).exists()
            ):
                boot.rebooting = True
                threading.Thread(target=self._reboot, args=(boot,), daemon=True).start()
        for instance in alive:
            if instance not in known:
                with self._lock:
                    self.boots.append(Boot(instance, "", time.monotonic()))
                threading.Thread(target=self._boot, args=(alive[instance],), daemon=True).start()

    def _boot(self, instance: dict[str, Any]) -> None:
        assert self.head is not None and self.slurm is not None
        with self._lock:
            boot = next(b for b in self.boots if b.instance == instance["InstanceId"])
            nth = len(self.boots) - 1
        name = None
        while name is None and not self._stop.is_set():
            name = self._name_of(boot.instance)
            if name is None:
                time.sleep(0.2)
        if name is None:
            return
        boot.name = name
        time.sleep(self.boot_seconds)
        node = StandinNode(self.image, name, shared_from=self.head, shares=("opt/slurm",))
        boot.node = node
        self.prepare(node, nth)
        node.write(REBOOT_PROGRAM, f"#!/bin/sh\ntouch {REBOOT_ASKED}\n", 0o755)
        gate = node.run(["/bin/bash", GATE], env=CLOUD_INIT_ENV, timeout=600)
        boot.gated, boot.passed = time.monotonic(), gate.returncode == 0
        if not boot.passed:
            # error_exit: shutdown -h now, and the launch template terminates on shutdown.
            self.emulator.client("ec2").terminate_instances(InstanceIds=[boot.instance])
            return
        self.slurm.join(node)
        self._slurmd(node, name, boot.instance)
        for _ in range(50):
            done = node.run(
                [
                    "/opt/slurm/bin/scontrol",
                    "update",
                    f"nodename={name}",
                    "state=resume",
                    "reason=Node start up",
                ],
                env=CLOUD_INIT_ENV,
            )
            if done.returncode == 0 or "Invalid node state" in done.stderr:
                break
            time.sleep(0.2)
        boot.resumed = time.monotonic()

    def _reboot(self, boot: Boot) -> None:
        """The instance reboots: slurmd and its job steps end, /run empties and the
        kernel's log starts anew (`journalctl -k` shows the current boot's: journalctl(1),
        -k implies -b); at boot, fmctl-verify.service (``verify-node.sh --once-per-boot``,
        which slurmd.service requires) runs before slurmd, and slurmd starts only if it
        passed, reporting itself booted when it started (``_slurmd``)."""
        node = boot.node
        assert node is not None
        asked = time.monotonic()
        # Slurm's daemons on the node end. Not by a pattern on command lines: "slurm" is in
        # fmctl's scripts' paths too (/opt/fmctl/slurm/lib/...), and the agent a test runs
        # on the node, which asked Slurm for this reboot, must be left to return what it
        # recorded (on a node, systemd's shutdown starts a moment after RebootProgram; here
        # the kill is at once, and at a high load it cut the agent's last lines short).
        node.run(["pkill", "-KILL", "-x", "slurmd"], env=SSM_ENV)
        node.run(["pkill", "-KILL", "-x", "slurmstepd"], env=SSM_ENV)
        node.run(["rm", "-rf", "/run/fmctl", REBOOT_ASKED, KERNEL_LOG], env=SSM_ENV)
        time.sleep(self.boot_seconds)
        if self.on_reboot is not None:
            self.on_reboot(node)
        gate = node.run(["/bin/bash", GATE, "--once-per-boot"], env=SSM_ENV, timeout=600)
        boot.reboots.append((asked, gate.returncode == 0))
        if gate.returncode == 0:
            self._slurmd(node, boot.name, boot.instance, rebooted=True)
        boot.rebooting = False

    @staticmethod
    def _slurmd(node: StandinNode, name: str, instance: str, rebooted: bool = False) -> None:
        """slurmd as ParallelCluster's slurmd.service starts it: with the node's name and,
        since the cookbook's PR 2876 (3.13.0: "Set instance ID and instance type in Slurm upon
        compute nodes launch"), its instance's id and type, by which clustermgtd pairs the
        node with its instance (clustermgtd.py _update_slurm_nodes_with_ec2_info).

        After a reboot the node must look booted since Slurm asked: slurmctld ignores the
        registration of a node it asked to reboot while its boot time (now less the uptime
        slurmd reports) is before the request (node_mgr.c waiting_for_node_boot), then marks
        it down at ResumeTimeout. A stand-in node shares this machine's kernel, so its
        sysinfo(2) uptime never restarts; slurmd's own ``-b`` (slurmd(8): "Report node
        rebooted when daemon restarted. Used for testing purposes.") reports the uptime from
        slurmd's start instead (get_mach_stat.c get_up_time), which is after the request."""
        node.daemon(
            [
                "/opt/slurm/sbin/slurmd",
                "-D",
                *(["-b"] if rebooted else []),
                "-N",
                name,
                "--instance-id",
                instance,
                "--instance-type",
                INSTANCE_TYPE,
            ]
        )

    def stop(self) -> None:
        """clustermgtd, the watcher and every node, stopped; the scratch folder removed."""
        self._stop.set()
        if self._daemon is not None:
            self._daemon.terminate()
            try:
                self._daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._daemon.kill()
        if self._watcher is not None:
            self._watcher.join(timeout=10)
        for boot in self.boots:
            if boot.node is not None:
                boot.node.stop()
        if self.head is not None:
            self.head.stop()
        shutil.rmtree(self._scratch, ignore_errors=True)
