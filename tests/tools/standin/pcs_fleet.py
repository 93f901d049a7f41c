"""AWS PCS's own side of a sandbox PCS cluster, played on stand-in nodes (issue 33): the
sandbox's PCS (fmctl_sandbox/pcs.py) launches each node group's instances in its EC2 and
runs nothing on them; this harness boots them as PCS boots them and runs the Slurm
controller PCS would run, so that `fmctl up --wait-healthy` and `fmctl health` meet a real
slurmctld, real slurmd and fmctl's scripts as a PCS node runs them.

What PCS does, and where that is said:
- A compute node group's Slurm nodes are named after it, numbered up to its maximum
  instance count (``NAME-[1-N]``: the PCS User Guide, "Explore the cluster environment in
  AWS PCS"); a queue is a partition of its node groups' nodes (CreateQueue's
  computeNodeGroupConfigurations). The cluster's slurmCustomSettings go into slurm.conf.
- A node boots (botocore's PCS model: NodeLifecycleStages, NodeLifecycleScript): PCS sets
  it up (here: Slurm's files and the cluster's munge key), runs each nodeBootstrapped
  script before slurmd, fetched from its scriptLocation and checked against its SHA-256
  checksum, with its arguments; starts slurmd; once the node has registered, runs each
  nodeReady script. A script that fails has PCS terminate the node (onError TERMINATE),
  and the group launches another to keep its minimum. cloud-init's user data runs after
  the first stage (nothing orders the two; test_standin_pcs_gate.py runs them so too).

Deviations, each because this machine is not AWS:
- The controller is a stand-in node; it is the login node too: Run Command's scripts (the
  sandbox's SSM runs them on this machine with the nodes' tools first on PATH) reach its
  Slurm through wrappers that enter it. The login node group's instances boot nothing.
- Slurm's files are the controller's, shared with the nodes (PCS runs configless: its
  nodes fetch the configuration from the controller); on a node, PCS's installer prefix is
  a link to them.
- Every node's NodeAddr is 127.0.0.1 with a port of its own (the instances' addresses are
  not this machine's). When the harness gives an instance a node name it sets the node's
  NodeHostname to the instance's hostname, as a Slurm resume program does (Slurm's cloud
  scheduling guide, "elastic computing"): how PCS pairs an instance with a node name is
  not documented.
- S3: each node gets the artifact bucket's objects where the stand-in `aws` reads them.
- The nodes reach no internet: each names an empty release mirror (fmctl's
  /etc/fmctl/release-mirror, lib/release.sh), so the exporters' downloads fail at once, with
  the warnings a node without a way out prints, instead of after curl's five retries.
- A reboot (`systemctl reboot` on the node: the stand-in systemctl's request file) ends
  every process of the node, empties /run and starts the kernel's log anew (journalctl -k
  shows the current boot's), then boots again as PCS boots a node at a reboot: only the
  scripts whose executionPolicy is EVERY_BOOT run (FIRST_BOOT_ONLY, the default, does not:
  botocore's PCS model, ExecutionPolicy), each from the node's own copy (CACHE_ONCE); a
  failing one ends the node as at its first boot; cloud-init's user data does not run
  again (its scripts run once per instance). A test may hold an instance in its reboot
  (``reboot_gate``), as a slow reboot would.
- No systemd runs on a stand-in node: each timer unit the boot started (the stand-in
  systemctl's records) has its service started every OnUnitActiveSec, the first time
  OnBootSec after the boot's last stage (systemd.timer(5)); so fmctl's health agent runs
  on its timer, as on an instance.
- The instance's hardware: a fault asked of the sandbox for an instance (`fmctl sandbox
  fault`, which the tests' double records) reaches its node as the hardware would show it
  to fmctl's agent: an Xid (an uncorrectable ECC error is Xid 48) is the driver's line in
  the kernel log (the sandbox's own line, ``eks_repair.kernel_line``), `--gpu-missing N`
  takes N GPUs from nvidia-smi's list, `--efa-down N` N EFA devices from fi_info's,
  `--clear` lays the node's hardware out anew (the kernel's lines stay). The sandbox's PCS
  acts on the same fault as its own monitoring would (``fmctl_sandbox/pcs_repair.py``).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fmctl_sandbox.eks_repair import kernel_line
from provisioner.catalog.pcs import slurm_prefix
from tests.tools import sandbox_doubles
from tests.tools.slurm_cluster import free_port
from tests.tools.standin import recorded, rootfs
from tests.tools.standin.node import CLOUD_INIT_ENV, SSM_ENV, StandinNode
from tests.tools.standin.slurm import StandinSlurm, nodes_conf

ROOT = Path(__file__).resolve().parents[3]
CLUSTER_TAG = "aws:pcs:cluster-id"
GROUP_TAG = "aws:pcs:compute-node-group-id"
#: The login node's Slurm commands, as Run Command's scripts call them.
COMMANDS = ("sinfo", "scontrol", "squeue", "sbatch", "srun", "scancel", "sacct")
#: What a failing test is shown of a node: the gate's report, and the end of slurmd's log.
REPORT = "/var/lib/fmctl/health/verify.txt"
SLURMD_LOG = "tail -n 30 /var/log/slurmd.log"
#: Where this stand-in of PCS's agent keeps a node's lifecycle scripts.
SCRIPTS = "/var/lib/standin-pcs/scripts"
#: What systemd gives a service's processes: its default PATH (systemd.exec(5)).
SERVICE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
#: The stand-in systemctl's record of a `systemctl reboot` (tests/tools/standin/bin/systemctl).
REBOOT_ASKED = "/var/lib/standin-reboot-asked"
#: The stand-in journalctl's kernel log (the current boot's lines).
KERNEL_LOG = "/etc/standin/kernel.log"
#: systemd's time spans the timers here use (systemd.time(7)), in seconds.
SPAN_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "ms": 0.001}


def _span(text: str) -> float:
    """A systemd time span of one number and unit ("30s", "2min"), in seconds."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", text)
    if found is None or found.group(2) not in SPAN_UNITS:
        raise ValueError(f"a time span this harness does not read: {text!r}")
    return float(found.group(1)) * SPAN_UNITS[found.group(2)]


def example_spec(folder: Path, name: str, region: str) -> Path:
    """The Slurm example on PCS as this harness runs it: two p5.48xlarge nodes on demand, no
    FSx (the stand-in nodes have no Lustre), the rest its defaults (health on: the gate with
    DCGM level 2, EFA loopbacks, the pair)."""
    data = yaml.safe_load((ROOT / "examples/p5-slurm-capacity-block.yaml").read_text())
    data["metadata"] = {"name": name, "region": region}
    data["network"] = {"availabilityZone": f"{region}a"}
    pool = data["compute"]["gpuPools"][0]
    pool.pop("capacityReservationId", None)
    pool.pop("capacity", None)
    pool["count"] = 2
    data["storage"] = {}
    data["slurm"] = {"provider": "pcs"}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def p5_ami(node: StandinNode, gpus_missing: int = 0) -> None:
    """A p5.48xlarge as PCS's AMI gives it: the recorded tools' answers (``gpus_missing``
    GPUs off the bus), nccl-tests built (the stand-in all_reduce_perf)."""
    data = ROOT / "tests/data/check"
    gpus = (data / "nvidia-smi-healthy.csv").read_text().splitlines()
    node.write("/etc/standin/nvidia-smi.csv", "\n".join(gpus[: len(gpus) - gpus_missing]) + "\n")
    node.write("/etc/standin/fi_info.txt", recorded.fi_info(recorded.p5_domains(32), 2))
    node.write("/etc/standin/dcgmi-diag.json", (data / "dcgmi-diag-healthy.json").read_text())
    stand_in = (ROOT / "tests/tools/standin/nccl/all_reduce_perf").read_text()
    node.write("/opt/nccl-tests/build/all_reduce_perf", stand_in, 0o755)


@dataclass
class Boot:
    """One compute instance as the harness booted it."""

    instance: str
    group: str
    seen: float
    #: How many instances booted before it (what ``PcsFleet.prepare`` was told).
    nth: int = 0
    name: str = ""
    node: StandinNode | None = None
    #: When its slurmd registered, and when its last stage ended (0: not yet).
    registered: float = 0.0
    ready: float = 0.0
    #: Why PCS ended it, when a stage failed: "STAGE SCRIPT: exit N".
    failed: str = ""
    #: Each stage's output, for a failing test's message.
    output: list[str] = field(default_factory=list)
    #: The faults its hardware was given (``fmctl sandbox fault``), in order.
    faults: list[dict[str, Any]] = field(default_factory=list)
    #: How many times it rebooted, and whether it is rebooting now.
    reboots: int = 0
    rebooting: bool = False


@dataclass(frozen=True)
class Group:
    """A compute node group as the controller configures it."""

    ident: str
    name: str
    maximum: int
    template: dict[str, Any]
    stages: dict[str, Any]


@dataclass
class PcsFleet:
    """PCS's controller and node agent for sandbox PCS cluster ``cluster``."""

    sandbox: Any  # tests.engine.harness.Sandbox
    region: str
    cluster: str
    image: Path
    #: Lays a new instance out before PCS sets it up (the tools' answers of its hardware):
    #: called with the node and how many instances have booted before it.
    prepare: Callable[[StandinNode, int], None]
    #: The nodes' tools folder (``Sandbox.node_tools``): the login node's Slurm commands go
    #: there.
    tools: Path
    #: From launch to PCS's first stage (EC2's pending, the OS boot, PCS's own setup); a
    #: reboot's boot takes as long.
    boot_seconds: float = 0.0
    #: The nodes' systemd timers' spans are multiplied by it (a benchmark's clock).
    timer_scale: float = 1.0
    boots: list[Boot] = field(default_factory=list)
    #: Set: a rebooting instance boots again at once (after ``boot_seconds``); a test clears
    #: it to hold instances in their reboot.
    reboot_gate: threading.Event = field(default_factory=threading.Event)
    controller: StandinNode | None = None
    slurm: StandinSlurm | None = None
    groups: dict[str, Group] = field(default_factory=dict)
    #: Node group id -> its queue (partition): filled once the controller is configured.
    _partition: dict[str, str] = field(default_factory=dict)
    _prefix: str = ""
    #: How many of the sandbox's recorded node faults were looked at.
    _faults_seen: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _watcher: threading.Thread | None = None
    _booting: list[threading.Thread] = field(default_factory=list)
    _errors: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix="fmctl-pcs-")) / "watch-errors.log"
    )

    def start(self) -> None:
        """The controller's node, the login node's commands in the tools folder, and the
        watcher that boots the cluster's instances as they come."""
        self.reboot_gate.set()
        self.controller = StandinNode(self.image, "pcs-controller")
        self.tools.mkdir(parents=True, exist_ok=True)
        for command in COMMANDS:
            self.controller.entry(self.tools / command, f"/opt/slurm/bin/{command}")
        aws = self.sandbox.aws(self.region)
        self._pcs, self._ec2, self._s3 = aws.client("pcs"), aws.client("ec2"), aws.client("s3")
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def errors(self) -> str:
        """What the watcher's looks raised (each is retried)."""
        return self._errors.read_text() if self._errors.exists() else ""

    # -- PCS's controller ----------------------------------------------------------------

    def _cluster(self) -> dict[str, Any] | None:
        for item in self._pcs.list_clusters()["clusters"]:
            if item["name"] == self.cluster and item["status"] == "ACTIVE":
                found: dict[str, Any] = self._pcs.get_cluster(clusterIdentifier=item["id"])
                return found["cluster"]
        return None

    def _controller_up(self, cluster: dict[str, Any]) -> None:
        """The cluster is ACTIVE: its controller answers (no nodes yet), with the cluster's
        slurmCustomSettings."""
        settings = [
            (s["parameterName"], s["parameterValue"])
            for s in (cluster.get("slurmConfiguration") or {}).get("slurmCustomSettings") or []
        ]
        assert self.controller is not None
        self._prefix = slurm_prefix(cluster["scheduler"]["version"])
        self.slurm = StandinSlurm(self.controller, [], settings, pcluster=False)

    def _configure(self, cluster: dict[str, Any]) -> None:
        """Once the cluster's queues are ACTIVE: its nodes and partitions, as PCS generates
        them from its node groups and queues, and the controller told (nothing before)."""
        ident = cluster["id"]
        queues = [
            self._pcs.get_queue(clusterIdentifier=ident, queueIdentifier=q["id"])["queue"]
            for q in self._pcs.list_queues(clusterIdentifier=ident)["queues"]
        ]
        if not queues or any(q["status"] != "ACTIVE" for q in queues):
            return
        for item in self._pcs.list_compute_node_groups(clusterIdentifier=ident)[
            "computeNodeGroups"
        ]:
            group = self._pcs.get_compute_node_group(
                clusterIdentifier=ident, computeNodeGroupIdentifier=item["id"]
            )["computeNodeGroup"]
            self.groups[group["id"]] = Group(
                group["id"],
                group["name"],
                int(group["scalingConfiguration"]["maxInstanceCount"]),
                group["customLaunchTemplate"],
                (group.get("nodeLifecycleActions") or {}).get("stages") or {},
            )
        declared, ports = [], {}
        for queue in queues:
            for config in queue["computeNodeGroupConfigurations"]:
                group = self.groups[config["computeNodeGroupId"]]
                self._partition[group.ident] = queue["name"]
                for i in range(1, group.maximum + 1):
                    name = f"{group.name}-{i}"
                    ports[name] = free_port()
                    declared.append((name, queue["name"]))
        assert self.slurm is not None and self.controller is not None
        self.controller.write(
            "/opt/slurm/etc/slurm_parallelcluster.conf", nodes_conf([], ports, declared)
        )
        said = self.controller.run(["/opt/slurm/bin/scontrol", "reconfigure"], env=SSM_ENV)
        assert said.returncode == 0, said.stderr

    # -- the instances --------------------------------------------------------------------

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                self._look()
            except Exception as e:  # a look that failed is retried
                with self._errors.open("a") as log:
                    log.write(f"{e!r}\n")
            self._stop.wait(0.3)

    def _look(self) -> None:
        cluster = self._cluster()
        if cluster is None:
            return
        if self.slurm is None:
            self._controller_up(cluster)
        if not self._partition:
            self._configure(cluster)
            if not self._partition:
                return
        # The faults asked for before the instances are listed: an instance the sandbox's
        # PCS replaced for its fault is gone from the list (the double records a fault
        # once the sandbox has acted on it).
        asked = sandbox_doubles.control(self.sandbox.home, "/_fmctl/node-faults")
        alive = {}
        wanted = [
            {"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster["id"]]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
        for reservation in self._ec2.describe_instances(Filters=wanted)["Reservations"]:
            for instance in reservation["Instances"]:
                alive[instance["InstanceId"]] = instance
        with self._lock:
            known = {b.instance: b for b in self.boots}
        for instance, boot in known.items():
            if instance not in alive and boot.node is not None:
                boot.node.stop()  # terminated: the node is gone, its name free again
                boot.node = None
                boot.name = ""
            elif (
                boot.node is not None
                and boot.registered
                and not boot.rebooting
                and boot.node.path(REBOOT_ASKED).exists()
            ):
                boot.rebooting = True
                thread = threading.Thread(target=self._reboot, args=(boot,), daemon=True)
                self._booting.append(thread)
                thread.start()
        for instance, found in alive.items():
            tags = {t["Key"]: t["Value"] for t in found.get("Tags", [])}
            group = tags.get(GROUP_TAG, "")
            if instance in known or group not in self._partition:
                continue  # booted already, or a login node (the controller plays it)
            boot = Boot(instance, group, time.monotonic())
            with self._lock:
                self.boots.append(boot)
                boot.nth = len(self.boots) - 1
                boot.name = self._free_name(self.groups[group])
            host = str(found.get("PrivateDnsName") or instance).split(".", 1)[0]
            thread = threading.Thread(target=self._boot, args=(boot, host), daemon=True)
            self._booting.append(thread)
            thread.start()
        self._hardware(asked, known)

    def _free_name(self, group: Group) -> str:
        taken = {b.name for b in self.boots if b.group == group.ident and b.name}
        for i in range(1, group.maximum + 1):
            if f"{group.name}-{i}" not in taken:
                return f"{group.name}-{i}"
        raise RuntimeError(f"node group {group.name}: more instances than its maximum")

    def _boot(self, boot: Boot, host: str) -> None:
        assert self.slurm is not None and self.controller is not None
        group = self.groups[boot.group]
        if self._stop.wait(self.boot_seconds):
            return
        node = StandinNode(self.image, host, shared_from=self.controller, shares=("opt/slurm",))
        boot.node = node
        if self._stop.is_set():
            return  # stop() stops it
        self._lay_out(node, group)
        self.prepare(node, boot.nth)
        # PCS's setup: the cluster's munge key, and the node named for the instance.
        self.slurm.join(node)
        self.slurm.scontrol("update", f"nodename={boot.name}", f"nodehostname={host}")
        self._start(boot, group, first=True)

    def _start(self, boot: Boot, group: Group, first: bool) -> None:
        """From PCS's first stage to the node's timers, at its first boot or a reboot."""
        assert self.slurm is not None and boot.node is not None
        node = boot.node
        if not self._stage(boot, group, "nodeBootstrapped", first):
            return
        if first:
            self._user_data(node, group, boot)
        node.daemon([f"{self._prefix}/sbin/slurmd", "-D", "-N", boot.name])
        state = self.slurm.wait_state(boot.name, ("IDLE", "RESERVED", "DRAIN"), timeout=60)
        boot.registered = time.monotonic()
        boot.output.append(f"registered: {state}")
        if self._stage(boot, group, "nodeReady", first):
            boot.ready = time.monotonic()
            self._timers(node)

    def _reboot(self, boot: Boot) -> None:
        """The instance reboots (see the module's docstring), then boots as PCS boots it."""
        node = boot.node
        assert node is not None
        boot.output.append("reboot")
        # Every process but the node's init ends (kill(2): -1 spares init and the caller).
        node.run(
            ["/bin/sh", "-c", f"rm -f {REBOOT_ASKED} {KERNEL_LOG}; kill -KILL -1; rm -rf /run/*"],
            env=SSM_ENV,
        )
        boot.ready = 0.0
        while not self.reboot_gate.wait(0.3):
            if self._stop.is_set():
                return
        if self._stop.wait(self.boot_seconds) or boot.node is None:
            return
        boot.reboots += 1
        try:
            self._start(boot, self.groups[boot.group], first=False)
        finally:
            boot.rebooting = False

    def _timers(self, node: StandinNode) -> None:
        """systemd's part: every timer unit started during the boot runs its service every
        OnUnitActiveSec, the first time OnBootSec from now (systemd.timer(5); Unit=, or the
        timer's own name, names the service)."""
        started = node.run(["/bin/sh", "-c", "ls /run/standin-systemd"], env=SSM_ENV)
        for timer in started.stdout.split():
            if not timer.endswith(".timer"):
                continue
            unit = node.path(f"/etc/systemd/system/{timer}").read_text()
            said = dict(line.split("=", 1) for line in unit.splitlines() if "=" in line)
            service = said.get("Unit", timer.removesuffix(".timer") + ".service")
            first = _span(said.get("OnBootSec", "0")) * self.timer_scale
            period = _span(said["OnUnitActiveSec"]) * self.timer_scale
            node.daemon(
                [
                    "/bin/bash",
                    "-c",
                    f"sleep {first:g}; while :; do sleep {period:g} & "
                    f"systemctl start {service} >/dev/null 2>&1; wait; done",
                ],
                env=SERVICE_ENV,
            )

    # -- the instances' hardware ------------------------------------------------------------

    def _hardware(self, asked: list[dict[str, Any]], known: dict[str, Boot]) -> None:
        """Give each booted instance the faults asked for it since the last look."""
        for item in asked[self._faults_seen :]:
            self._faults_seen += 1
            boot = known.get(str(item["node"]))
            if item["region"] != self.region or boot is None or boot.node is None:
                continue  # another cluster's, or no node (yet, or any more) to show it
            boot.faults.append(item["fault"])
            self._show(boot, boot.node, item["fault"])

    def _show(self, boot: Boot, node: StandinNode, fault: dict[str, Any]) -> None:
        """What the node's kernel log and tools show of ``fault`` (see the module's
        docstring)."""
        if fault.get("clear"):
            self.prepare(node, boot.nth)
            return
        line = kernel_line(fault)
        if line:
            stamp = time.strftime("%b %d %H:%M:%S")
            with node.path("/etc/standin/kernel.log").open("a") as log:
                log.write(f"{stamp} kernel: {line}\n")
        if "gpuMissing" in fault:
            listed = node.path("/etc/standin/nvidia-smi.csv").read_text().splitlines()
            kept = listed[: max(0, len(listed) - int(fault["gpuMissing"]))]
            node.write("/etc/standin/nvidia-smi.csv", "".join(f"{row}\n" for row in kept))
        if "efaDown" in fault:
            text = node.path("/etc/standin/fi_info.txt").read_text()
            domains = list(dict.fromkeys(re.findall(r"\b(rdmap\d+s\d+)-", text)))
            kept = domains[: max(0, len(domains) - int(fault["efaDown"]))]
            node.write("/etc/standin/fi_info.txt", recorded.fi_info(kept, 2) if kept else "")

    def _lay_out(self, node: StandinNode, group: Group) -> None:
        """As PCS's AMI and its setup leave a node: Slurm in the installer's prefix; the
        artifact bucket's objects where the stand-in `aws` reads them; systemd's oneshot
        units run when started (the nodeReady stage starts one and reads what it left)."""
        laid = node.run(
            [
                "/bin/sh",
                "-c",
                f"install -d {Path(self._prefix).parent} && ln -sfn /opt/slurm {self._prefix}",
            ],
            env=SSM_ENV,
        )
        assert laid.returncode == 0, laid.stderr
        node.write("/etc/standin/systemd-runs-oneshot", "")
        node.write("/etc/fmctl/release-mirror", "file:///var/lib/standin-no-mirror\n")
        buckets = {
            str(script["scriptSource"]["scriptLocation"]).removeprefix("s3://").split("/", 1)[0]
            for scripts in group.stages.values()
            for script in scripts
        }
        for bucket in buckets:
            paginator = self._s3.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=bucket):
                for obj in page.get("Contents", []):
                    body = self._s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
                    path = node.path(f"/var/lib/standin-s3/{bucket}/{obj['Key']}")
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(body)

    def _stage(self, boot: Boot, group: Group, stage: str, first: bool = True) -> bool:
        """Run the stage's scripts in order (at a reboot, the EVERY_BOOT ones); the first
        that fails has PCS end the node."""
        node = boot.node
        assert node is not None
        for script in group.stages.get(stage) or []:
            if not first and script.get("executionPolicy", "FIRST_BOOT_ONLY") != "EVERY_BOOT":
                continue
            bucket, key = (
                str(script["scriptSource"]["scriptLocation"]).removeprefix("s3://").split("/", 1)
            )
            # The object as the node got it from S3 (_lay_out's copy of the bucket).
            body = node.path(f"/var/lib/standin-s3/{bucket}/{key}").read_bytes()
            if hashlib.sha256(body).hexdigest() != script["scriptSource"]["checksum"]:
                return self._end(boot, f"{stage} {script['name']}: checksum mismatch")
            inside = f"{SCRIPTS}/{script['name']}"
            node.write(inside, body.decode(), 0o700)
            ran = node.run([inside, *script.get("arguments", [])], env=CLOUD_INIT_ENV, timeout=900)
            boot.output.append(f"{stage} {script['name']}:\n{ran.stdout}\n{ran.stderr}")
            if ran.returncode != 0:
                return self._end(boot, f"{stage} {script['name']}: exit {ran.returncode}")
        return True

    def _user_data(self, node: StandinNode, group: Group, boot: Boot) -> None:
        """cloud-init's run of the launch template's shell part (its failure fails no node)."""
        version = self._ec2.describe_launch_template_versions(
            LaunchTemplateId=group.template["id"], Versions=[str(group.template["version"])]
        )["LaunchTemplateVersions"][0]
        encoded = version["LaunchTemplateData"].get("UserData") or ""
        text = base64.b64decode(encoded).decode()
        marker = 'Content-Type: text/x-shellscript; charset="us-ascii"\n\n'
        if marker not in text:
            return
        part = text.split(marker, 1)[1].split("\n--", 1)[0]
        node.write("/var/lib/cloud/instance/scripts/part-001", part, 0o700)
        ran = node.run(["/var/lib/cloud/instance/scripts/part-001"], timeout=900)
        boot.output.append(f"user data:\n{ran.stdout}\n{ran.stderr}")

    def _end(self, boot: Boot, why: str) -> bool:
        boot.failed = why
        sandbox_doubles.control(
            self.sandbox.home,
            "/_fmctl/pcs/terminate",
            {"region": self.region, "instance": boot.instance, "why": why},
        )
        return False

    # -- what tests ask ---------------------------------------------------------------------

    def wait_ready(self, count: int, timeout: float = 300) -> list[Boot]:
        """The first ``count`` nodes that got through every stage."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                ready = [b for b in self.boots if b.ready and b.node is not None]
            if len(ready) >= count:
                return ready
            time.sleep(0.3)
        raise AssertionError(f"{count} PCS nodes not ready in {timeout} s: {self.story()}")

    def story(self) -> str:
        """Each boot's state and its stages' output, and the watcher's errors."""
        lines = []
        with self._lock:
            boots = list(self.boots)
        for b in boots:
            lines.append(
                f"{b.instance} {b.name or '-'} registered={bool(b.registered)} "
                f"ready={bool(b.ready)} failed={b.failed or '-'} alive={b.node is not None} "
                f"faults={b.faults or '-'}"
            )
            lines += [f"  {out[-3000:]}" for out in b.output]
            if b.node is not None:
                # The gate's report, and the oneshot units' output (the stand-in systemctl
                # keeps it as the journal would).
                shown = b.node.run(
                    ["/bin/sh", "-c", f"cat {REPORT} /run/standin-systemd/*.journal; {SLURMD_LOG}"],
                    env=SSM_ENV,
                )
                lines.append(f"  verify.txt and journals:\n{shown.stdout[-3000:]}")
        if self.slurm is not None:
            lines.append(self.slurm.head.run(["/opt/slurm/bin/sinfo", "-R"], env=SSM_ENV).stdout)
            lines.append(self.slurm.log())
        return "\n".join(lines) + "\n" + self.errors()

    def stop(self) -> None:
        """The watcher, every node and the controller, stopped."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=10)
        # A node's end ends what runs in it: a boot under way returns; then any node a boot
        # made meanwhile goes too.
        for _ in range(2):
            for boot in self.boots:
                if boot.node is not None:
                    boot.node.stop()
                    boot.node = None
            for thread in self._booting:
                thread.join(timeout=30)
        if self.controller is not None:
            self.controller.stop()
        shutil.rmtree(self._errors.parent, ignore_errors=True)


@contextlib.contextmanager
def running(
    sandbox: Any,
    region: str,
    cluster: str,
    prepare: Callable[[StandinNode, int], None],
    folder: Path,
    boot_seconds: float = 0.0,
    timer_scale: float = 1.0,
) -> Iterator[PcsFleet]:
    """A started harness for sandbox PCS cluster ``cluster`` (``sandbox``: a
    ``tests.engine.harness.Sandbox``), whose login node's commands the sandbox's Run
    Command finds (the nodes' tools, in ``folder``/tools); stopped, and the tools taken
    back, on leaving."""
    tools = folder / "tools"
    fleet = PcsFleet(
        sandbox, region, cluster, rootfs.ensure(), prepare, tools, boot_seconds, timer_scale
    )
    try:
        fleet.start()
        sandbox.node_tools(tools)
        yield fleet
    finally:
        sandbox.node_tools(None)
        fleet.stop()


def up_healthy(sandbox: Any, fleet: PcsFleet, spec: Path) -> str:
    """`fmctl up --wait-healthy` of ``spec`` on the harness, with the NCCL pair at the AWS
    samples' 2 x p5.48xlarge figure (catalog/nccl_baselines.py: the pair passes); what it
    printed, once it succeeded."""
    assert fleet.controller is not None
    fleet.controller.write("/opt/slurm/etc/standin-nccl/healthy", "465.9")
    up = sandbox.fmctl(
        "up", "-f", str(spec), "--sandbox", "--yes", "--wait-healthy", "--healthy-timeout",
        "240", timeout=400,
    )  # fmt: skip
    assert up.returncode == 0, up.stdout + up.stderr + fleet.story()
    return str(up.stdout)
