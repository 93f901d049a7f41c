"""slurm/ on stand-in ParallelCluster nodes (tests/tools/standin): the head node's and a
compute node's custom actions run as cloud-init runs them (root, `env -i`, cinc's PATH), with
releases from a loopback mirror that holds only the upstream file names; a real slurmctld and
slurmd then run a job through the real prolog, epilog and task prolog; cluster-check.sh runs
as SSM Run Command runs it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import re
import shutil
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.catalog import load_catalog
from provisioner.check.slurm_gather import command_script
from provisioner.render import render
from provisioner.render.context import build_context
from provisioner.render.placeholders import fill
from provisioner.render.slurm import cluster_slurm_settings, health_env
from provisioner.spec.source import load_source
from provisioner.validate import validate_document
from tests.conftest import validate_text
from tests.tools.standin import nvidia_repo, recorded, rootfs
from tests.tools.standin.node import CLOUD_INIT_ENV, SSM_ENV, StandinNode
from tests.tools.standin.slurm import ComputeNode, StandinSlurm

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
EXAMPLE = ROOT / "examples" / "p5-slurm-capacity-block.yaml"
BUCKET = "fmctl-artifacts-standin"
RELEASES = DATA / "real" / "releases.yaml"


pytestmark = rootfs.required()


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _tarball(members: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _distro(image: Path) -> str:
    """The stand-in's OS as NVIDIA names its CUDA repositories (debian13)."""
    lines = (image / "etc/os-release").read_text().splitlines()
    fields = dict(line.split("=", 1) for line in lines if "=" in line)
    return fields["ID"].strip('"') + fields["VERSION_ID"].strip('"').split(".")[0]


def _mirror(folder: Path, distro: str) -> None:
    """The releases fmctl's scripts pin, under their upstream URLs' paths and file names (from
    tests/data/real/releases.yaml), each binary a stand-in that runs until stopped, and the
    sums files in the format each project publishes; and NVIDIA's CUDA repository for the
    node's OS (tests/tools/standin/nvidia_repo.py), signed, with the exporter package."""
    nvidia_repo.build(folder, distro, "x86_64", "amd64")
    stub = "#!/bin/sh\nexec sleep infinity\n"
    for release in yaml.safe_load(RELEASES.read_text())["releases"]:
        base = folder / release["url"].removeprefix("https://")
        base.mkdir(parents=True, exist_ok=True)
        blob = _tarball({m: stub for m in release["members"]})
        (base / release["archive"]).write_bytes(blob)
        digest = hashlib.sha256(blob).hexdigest()
        sums = release["sums"]
        if sums.endswith(".sha256"):
            (base / sums).write_text(digest)
        else:
            (base / sums).write_text(
                f"{'0' * 64}  other-file.tar.gz\n{digest}  {release['archive']}\n"
            )


@dataclass
class Cluster:
    head: StandinNode
    compute: StandinNode
    slurm: StandinSlurm
    results: dict[str, Any]
    config: dict[str, Any]


def _action(actions: dict[str, Any], event: str) -> tuple[str, list[str]] | None:
    """A custom action as rendered: its script (under slurm/) and Args."""
    if event not in actions:
        return None
    step = actions[event]["Sequence"][0]
    return step["Script"].split("/slurm/", 1)[1], [str(a) for a in step.get("Args", [])]


def _run_action(node: StandinNode, action: tuple[str, list[str]] | None) -> Any:
    """ParallelCluster downloads the action's Script and runs it with its Args (as root, from
    cinc's environment)."""
    assert action is not None
    script, args = action
    node.write("/var/tmp/action.sh", (ROOT / "slurm" / script).read_text(), 0o755)
    return node.run(["/bin/bash", "/var/tmp/action.sh", *args], env=CLOUD_INIT_ENV, timeout=300)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    image = rootfs.ensure()
    doc, _ = load_source(str(EXAMPLE))
    spec = validate_document(doc, "slurm").resolved
    assert spec is not None
    context = build_context(spec, load_catalog())
    files = render(spec, load_catalog()).files
    config_text = fill(
        files["parallelcluster/cluster-config.yaml"],
        {
            "artifactBucket": BUCKET,
            "fileSystemId": "fs-0123456789abcdef0",
            "efaSecurityGroupId": "sg-0123456789abcdef0",
            "privateSubnetId": "subnet-0123456789abcdef0",
            "publicSubnetId": "subnet-0fedcba9876543210",
        },
    )
    config = yaml.safe_load(config_text)
    mirror_dir = tmp_path_factory.mktemp("mirror")
    _mirror(mirror_dir, _distro(image))
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(mirror_dir)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    head = StandinNode(image, "ip-10-0-0-10")
    compute = StandinNode(image, "ip-10-0-16-20", shared_from=head)
    try:
        for node in (head, compute):
            # What `fmctl up` uploads: slurm/ and the rendered monitoring files.
            prefix = f"/var/lib/standin-s3/{BUCKET}/{context.name}/slurm"
            shutil.copytree(ROOT / "slurm", node.path(prefix), dirs_exist_ok=True)
            for path, text in files.items():
                if path.startswith("slurm/monitoring/") or path == "slurm/topology.conf":
                    node.write(f"{prefix}/{path.removeprefix('slurm/')}", text)
            node.write("/etc/fmctl/release-mirror", f"http://127.0.0.1:{server.server_port}\n")
        compute.write("/etc/standin/fi_info.txt", recorded.fi_info(recorded.p5_domains(32), 2))
        compute.write(
            "/etc/standin/nvidia-smi.csv", (DATA / "check/nvidia-smi-healthy.csv").read_text()
        )
        # A p5's GPUs' row remappers, as a recorded 8 x H100 answer shows them.
        compute.write(
            "/etc/standin/nvidia-smi-q.txt",
            (DATA / "real/nvidia-smi-q-remapped-rows-h100x8.txt").read_text(),
        )
        compute.write(
            "/etc/standin/dcgmi-diag.json", (DATA / "check/dcgmi-diag-healthy.json").read_text()
        )
        name = f"{context.pools[0].name}-st-{context.pools[0].compute_resource_name}-1"
        pool = context.pools[0]
        head_actions = config["HeadNode"]["CustomActions"]
        queue_actions = config["Scheduling"]["SlurmQueues"][0]["CustomActions"]
        results = {"head-start": _run_action(head, _action(head_actions, "OnNodeStart"))}
        slurm = StandinSlurm(
            head,
            [
                ComputeNode(
                    compute,
                    name,
                    pool.name,
                    pool.itype.cpu.sockets,
                    pool.itype.cpu.cores_per_socket,
                    pool.itype.cpu.threads_per_core,
                )
            ],
            cluster_slurm_settings(context),
        )
        results["head"] = _run_action(head, _action(head_actions, "OnNodeConfigured"))
        results["start"] = _run_action(compute, _action(queue_actions, "OnNodeStart"))
        results["compute"] = _run_action(compute, _action(queue_actions, "OnNodeConfigured"))
        slurm.start_slurmd()
        yield Cluster(head, compute, slurm, results, config)
    finally:
        server.shutdown()
        head.stop()
        compute.stop()


def _bucket_prefix(cluster: Cluster) -> str:
    """Where the stand-in's S3 holds what `up` uploaded (slurm/ of the cluster)."""
    return f"/var/lib/standin-s3/{BUCKET}/{_context_of(cluster).name}/slurm"


def _context_of(cluster: Cluster) -> Any:
    doc, _ = load_source(str(EXAMPLE))
    spec = validate_document(doc, "slurm").resolved
    assert spec is not None
    return build_context(spec, load_catalog())


def _ok(result: Any) -> None:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"


def test_head_and_compute_bootstrap_exit_0(cluster: Cluster) -> None:
    for result in cluster.results.values():
        _ok(result)


def test_the_verify_gate_passed_the_healthy_node(cluster: Cluster) -> None:
    """OnNodeConfigured ran the verify gate (slurm/lib/verify-node.sh) before slurmd, with
    the spec's default DCGM level, and recorded each check."""
    report = cluster.compute.path("/var/lib/fmctl/health/verify.txt").read_text().splitlines()
    assert report == [
        "ok gpus: 8 of 8",
        "ok ecc: no uncorrectable errors",
        "ok row-remap: no remap failed or pending",
        "ok efa: 32 of 32 devices",
        "ok efa-loopback: 32 of 32 devices passed traffic",
        "ok dcgm: level 2 diagnostic passed",
        # This cluster's train pool is one node: no peer to pair with (the pair has its
        # own tests: tests/slurm/test_standin_verify_pair.py).
        "skip nccl-pair: no pair floor for partition train (a pool of one node, or no EFA)",
    ], report
    assert "verify-node.sh" in (ROOT / "slurm/actions/on-node-configured.sh").read_text()


def test_the_verify_gate_runs_again_before_slurmd_after_a_reboot(cluster: Cluster) -> None:
    """OnNodeConfigured installed fmctl-verify.service, required by slurmd.service (the real
    systemctl enabled it): at this boot the node passed already, so slurmd's start is not
    held twice; after a reboot (/run forgotten) the gate runs again, and a node that fails
    it keeps slurmd from starting."""
    compute = cluster.compute
    unit = compute.path("/etc/systemd/system/fmctl-verify.service").read_text()
    assert "Before=slurmd.service" in unit and "RequiredBy=slurmd.service" in unit
    required = compute.path("/etc/systemd/system/slurmd.service.requires/fmctl-verify.service")
    assert required.is_symlink()
    verify = compute.run(
        ["systemd-analyze", "verify", "--man=no", "/etc/systemd/system/fmctl-verify.service"],
        env=SSM_ENV,
    )
    assert "fmctl-verify.service" not in verify.stderr, verify.stderr
    # ... and the pair's unit (lib/verify-pair.sh), after slurmd, pulled in by its start.
    pair = compute.path("/etc/systemd/system/fmctl-verify-pair.service").read_text()
    assert "After=slurmd.service" in pair and "WantedBy=slurmd.service" in pair
    wanted = compute.path("/etc/systemd/system/slurmd.service.wants/fmctl-verify-pair.service")
    assert wanted.is_symlink()
    verify = compute.run(
        ["systemd-analyze", "verify", "--man=no", "/etc/systemd/system/fmctl-verify-pair.service"],
        env=SSM_ENV,
    )
    assert "fmctl-verify-pair.service" not in verify.stderr, verify.stderr
    start = unit.split("ExecStart=", 1)[1].splitlines()[0].split()
    done = compute.run(start, env=SSM_ENV)
    _ok(done)
    assert done.stdout.startswith("ok: passed already since this boot"), done.stdout
    compute.run(["rm", "-f", "/run/fmctl/verified"], env=SSM_ENV)  # what a reboot does
    # Without the EFA loopback (half a second a device: it has tests of its own).
    settings = Path(start[-2]).parent.parent / "health.env"
    # Nor the NCCL pair (its own tests: test_standin_verify_pair.py; here no peer serves).
    fast = health_env(
        dataclasses.replace(
            _context_of(cluster), health_verify_efa_loopback=False, health_verify_nccl_pair=False
        )
    )
    before = (
        compute.path(str(settings)).read_text() if compute.path(str(settings)).exists() else None
    )
    compute.write(str(settings), fast)
    compute.write(
        "/etc/standin/nvidia-smi.csv", (DATA / "check/nvidia-smi-lost-gpu.csv").read_text()
    )
    try:
        done = compute.run(start, env=SSM_ENV)
        assert done.returncode == 1 and "FAIL gpus: 7 of 8" in done.stdout, done.stdout
        assert compute.run(["test", "-e", "/run/fmctl/verified"], env=SSM_ENV).returncode == 1
    finally:
        compute.write(
            "/etc/standin/nvidia-smi.csv", (DATA / "check/nvidia-smi-healthy.csv").read_text()
        )
    done = compute.run(start, env=SSM_ENV)
    _ok(done)
    assert "ok gpus: 8 of 8" in done.stdout
    assert compute.run(["test", "-e", "/run/fmctl/verified"], env=SSM_ENV).returncode == 0
    if before is None:
        compute.path(str(settings)).unlink()
    else:
        compute.write(str(settings), before)


@pytest.mark.parametrize(
    ("smi", "diag", "failed"),
    [
        ("nvidia-smi-lost-gpu.csv", "dcgmi-diag-healthy.json", "FAIL gpus: 7 of 8 (Unable to"),
        (
            "nvidia-smi-ecc.csv",
            "dcgmi-diag-healthy.json",
            "FAIL ecc: uncorrectable errors (GPU 5: 2)",
        ),
        (
            "nvidia-smi-healthy.csv",
            "dcgmi-diag-memory-fail.json",
            "FAIL dcgm: level 2 diagnostic, 1 failed",
        ),
        (
            "nvidia-smi-healthy.csv",
            "dcgmi-diag-v4-memory-fail.json",
            "FAIL dcgm: level 2 diagnostic, 2 failed",
        ),
    ],
)
def test_a_node_that_fails_the_verify_gate_fails_its_bootstrap(
    cluster: Cluster, smi: str, diag: str, failed: str
) -> None:
    """A GPU gone, uncorrectable ECC errors or a failed DCGM diagnostic (recorded outputs):
    OnNodeConfigured exits non-zero, so ParallelCluster never starts slurmd there and
    clustermgtd replaces the instance; the failing check is on record and in the error."""
    compute = cluster.compute
    compute.write("/etc/standin/nvidia-smi.csv", (DATA / "check" / smi).read_text())
    compute.write("/etc/standin/dcgmi-diag.json", (DATA / "check" / diag).read_text())
    # The spec's health.verify.efaLoopback: false, as `up` uploads it (half a second a
    # device saved; the loopback has a test of its own).
    settings = f"{_bucket_prefix(cluster)}/health.env"
    compute.write(
        settings,
        health_env(
            dataclasses.replace(
                _context_of(cluster),
                health_verify_efa_loopback=False,
                health_verify_nccl_pair=False,
            )
        ),
    )
    try:
        actions = cluster.config["Scheduling"]["SlurmQueues"][0]["CustomActions"]
        done = _run_action(compute, _action(actions, "OnNodeConfigured"))
        assert done.returncode == 1, done.stdout + done.stderr
        assert "failed the verify gate" in done.stderr
        report = compute.path("/var/lib/fmctl/health/verify.txt").read_text()
        assert failed in report, report
        # Only what failed is marked so.
        assert report.count("FAIL") == 1, report
        assert "efa-loopback" not in report
    finally:
        # Out of the bucket and off the node (`aws s3 sync` keeps what the bucket lost).
        compute.path(settings).unlink()
        compute.path("/opt/fmctl/slurm/health.env").unlink()
        compute.write(
            "/etc/standin/nvidia-smi.csv", (DATA / "check/nvidia-smi-healthy.csv").read_text()
        )
        # A p5's GPUs' row remappers, as a recorded 8 x H100 answer shows them.
        compute.write(
            "/etc/standin/nvidia-smi-q.txt",
            (DATA / "real/nvidia-smi-q-remapped-rows-h100x8.txt").read_text(),
        )
        compute.write(
            "/etc/standin/dcgmi-diag.json", (DATA / "check/dcgmi-diag-healthy.json").read_text()
        )


def test_an_efa_device_that_passes_no_traffic_fails_the_gate(cluster: Cluster) -> None:
    """Every device listed, one passing no traffic to itself (fi_pingpong over it, as the
    EFA installer's efa_test.sh): the gate fails on the loopback alone and names it."""
    compute = cluster.compute
    compute.write("/etc/standin/efa-loopback-fail", "rdmap24s0-rdm\n")
    compute.write("/etc/standin/efa-loopback-fail.fast", "")
    try:
        actions = cluster.config["Scheduling"]["SlurmQueues"][0]["CustomActions"]
        done = _run_action(compute, _action(actions, "OnNodeConfigured"))
        assert done.returncode == 1, done.stdout + done.stderr
        report = compute.path("/var/lib/fmctl/health/verify.txt").read_text()
        assert "FAIL efa-loopback: 1 of 32 devices passed no traffic (rdmap24s0-rdm)" in report
        assert "ok efa: 32 of 32 devices" in report and report.count("FAIL") == 1
    finally:
        compute.path("/etc/standin/efa-loopback-fail").unlink()
        compute.path("/etc/standin/efa-loopback-fail.fast").unlink()


def test_a_diagnostic_that_never_ends_fails_the_gate(cluster: Cluster) -> None:
    """DCGM's diagnostic hangs (a GPU that stopped answering): killed at its deadline, it
    fails the gate, where it used to print nothing and be said as skipped, so the node
    passed. The deadline is a test's 2 s, set as health.env sets the node's settings."""
    compute = cluster.compute
    compute.write("/etc/standin/dcgmi.hang", "")
    settings = f"{_bucket_prefix(cluster)}/health.env"
    quick = dataclasses.replace(
        _context_of(cluster), health_verify_efa_loopback=False, health_verify_nccl_pair=False
    )
    compute.write(settings, health_env(quick) + "FMCTL_HEALTH_VERIFY_DCGM_TIMEOUT=2\n")
    try:
        actions = cluster.config["Scheduling"]["SlurmQueues"][0]["CustomActions"]
        done = _run_action(compute, _action(actions, "OnNodeConfigured"))
        assert done.returncode == 1, done.stdout + done.stderr
        report = compute.path("/var/lib/fmctl/health/verify.txt").read_text()
        assert "FAIL dcgm: level 2 diagnostic did not finish in 2 s" in report, report
        assert report.count("FAIL") == 1, report
    finally:
        compute.path("/etc/standin/dcgmi.hang").unlink()
        compute.path(settings).unlink()
        compute.path("/opt/fmctl/slurm/health.env").unlink()


def _eks_gate_containers() -> dict[str, dict[str, Any]]:
    """The EKS verify gate's Job for a p5 pool as fmctl renders it (the Job template in the
    controller's ConfigMap): its containers by name."""
    data = yaml.safe_load((ROOT / "examples/p5en-eks-fsx-s3.yaml").read_text())
    data["compute"]["gpuPools"][0]["instanceType"] = "p5.48xlarge"
    data.setdefault("health", {}).setdefault("verify", {})["kubernetesGate"] = True
    validation = validate_text(yaml.safe_dump(data, sort_keys=False))
    assert validation.ok and validation.resolved is not None, validation.problems
    files = render(validation.resolved, load_catalog()).files
    config = next(
        d
        for d in yaml.safe_load_all(files["kubernetes/health-verify/controller.yaml"])
        if d and d["metadata"]["name"] == "fmctl-verify-controller"
    )
    job = json.loads(config["data"][f"{data['compute']['gpuPools'][0]['name']}.json"])
    return {c["name"]: c for c in job["spec"]["template"]["spec"]["containers"]}


def _as_the_job_runs(node: StandinNode, container: dict[str, Any], **extra: str) -> Any:
    """One of the Job's containers on this node: its command and its environment (the
    node's name for spec.nodeName), the ConfigMap it mounts at /opt/fmctl being the same
    scripts the node has under /opt/fmctl/slurm/lib. The stand-in's tools answer with the
    recorded outputs a p5 gave, standing for what the container sees: the host's driver
    tools (nvidia-smi, dcgmi) and the Deep Learning Container's libfabric (fi_info,
    fi_pingpong)."""
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    for item in container["env"]:
        env[item["name"]] = item.get("value", node.hostname)
    env.update(extra)
    argv = [a.replace("/opt/fmctl/", "/opt/fmctl/slurm/lib/") for a in container["command"]]
    return node.run(argv, env=env, timeout=180)


def test_the_eks_gate_runs_the_same_checks_as_its_job_does(cluster: Cluster) -> None:
    """verify-node.sh as the EKS gate's Job runs it (FMCTL_VERIFY_SCHEDULER=kubernetes, its
    settings in the containers' environment): the GPU container checks the GPUs and runs
    DCGM's diagnostic, the EFA container the devices and their loopback; the verdict is the
    exit status; nothing of Slurm's (no boot record, no reservation hold), and the node's
    own report is not touched. A GPU off the bus, and a diagnostic that never
    ends, fail it."""
    compute = cluster.compute
    containers = _eks_gate_containers()
    assert set(containers) == {"gpu", "efa"}
    record = compute.path("/run/fmctl/verified")
    report = compute.path("/var/lib/fmctl/health/verify.txt")
    before = (record.stat().st_mtime if record.exists() else None, report.read_text())

    gpu = _as_the_job_runs(compute, containers["gpu"])
    assert gpu.returncode == 0, gpu.stdout + gpu.stderr
    assert "ok gpus: 8 of 8" in gpu.stdout and "ok ecc: no uncorrectable errors" in gpu.stdout
    assert "ok dcgm: level 2 diagnostic passed" in gpu.stdout
    assert "efa" not in gpu.stdout  # the other container's part
    efa = _as_the_job_runs(compute, containers["efa"])
    assert efa.returncode == 0, efa.stdout + efa.stderr
    assert "ok efa: 32 of 32 devices" in efa.stdout
    assert "ok efa-loopback: 32 of 32 devices passed traffic" in efa.stdout
    assert "gpus" not in efa.stdout
    assert (record.stat().st_mtime if record.exists() else None, report.read_text()) == before

    compute.write(
        "/etc/standin/nvidia-smi.csv", (DATA / "check/nvidia-smi-lost-gpu.csv").read_text()
    )
    try:
        lost = _as_the_job_runs(compute, containers["gpu"])
        assert lost.returncode == 1
        assert "FAIL gpus: 7 of 8 (Unable to determine the device handle" in lost.stdout
    finally:
        compute.write(
            "/etc/standin/nvidia-smi.csv", (DATA / "check/nvidia-smi-healthy.csv").read_text()
        )
    compute.write("/etc/standin/dcgmi.hang", "")
    try:
        hung = _as_the_job_runs(compute, containers["gpu"], FMCTL_HEALTH_VERIFY_DCGM_TIMEOUT="2")
        assert hung.returncode == 1
        assert "FAIL dcgm: level 2 diagnostic did not finish in 2 s" in hung.stdout
    finally:
        compute.path("/etc/standin/dcgmi.hang").unlink()

    # The Job names the node's one host engine (FMCTL_DCGM_HOST, the dcgm DaemonSet's): with
    # none answering, the gate waits for it, then skips the diagnostic, and starts no engine
    # of its own beside the node's (NVIDIA supports one: NVIDIA/DCGM#108).
    env = {e["name"]: e.get("value") for e in containers["gpu"]["env"]}
    assert env["FMCTL_DCGM_HOST"] == "127.0.0.1"
    engine = compute.path("/etc/standin/dcgmi-diag.json")
    saved = engine.read_text()
    engine.unlink()
    try:
        alone = _as_the_job_runs(compute, containers["gpu"], FMCTL_DCGM_WAIT="2")
        started = compute.run(["test", "-e", "/run/standin/nv-hostengine"]).returncode == 0
    finally:
        compute.write("/etc/standin/dcgmi-diag.json", saved)
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert "skip dcgm: no diagnostic (Error: Unable to connect to host engine." in alone.stdout
    assert not started  # (the stand-in nv-hostengine daemonizes as the real one would)


def test_exporters_installed_from_their_real_release_names(cluster: Cluster) -> None:
    """Every download hit a name the upstream release has (the mirror holds nothing else), and
    its unit passed systemd-analyze verify."""
    head = cluster.head.path("/var/lib/fmctl/exporters")
    compute = cluster.compute.path("/var/lib/fmctl/exporters")
    assert (head / "slurm").read_text().strip() == "ok"
    assert (head / "grafana").read_text().strip() == "ok"
    assert (compute / "node").read_text().strip() == "ok"
    assert (compute / "efa").read_text().strip() == "ok"
    # Published where `fmctl status` reads it: NAME-check/ in the artifact bucket.
    published = cluster.head.path(
        f"/var/lib/standin-s3/{BUCKET}/llm-pretrain-check/exporters/head.txt"
    )
    # (--grafana installs Prometheus too: one record for both.)
    assert published.read_text().splitlines() == ["grafana ok", "slurm ok"]
    for unit in ("fmctl-slurm-exporter", "fmctl-prometheus", "fmctl-grafana"):
        ok = cluster.head.run(["systemctl", "is-active", "--quiet", unit], env=SSM_ENV)
        assert ok.returncode == 0, unit
    for unit in ("fmctl-node-exporter", "fmctl-efa-exporter", "fmctl-efa-metrics"):
        assert (
            cluster.compute.run(["systemctl", "is-active", "--quiet", unit], env=SSM_ENV).returncode
            == 0
        )


def test_dcgm_exporter_comes_from_nvidias_repository(cluster: Cluster) -> None:
    """The AMI has DCGM 4 but no dcgm-exporter and no Docker/Podman: the node's apt installs
    NVIDIA's datacenter-gpu-manager-exporter from the CUDA repository (key and source from
    cuda-keyring, the signed index through the mirror), the repository is removed again, and
    fmctl's unit runs the packaged binary against the host engine."""
    node = cluster.compute
    assert node.path("/var/lib/fmctl/exporters/dcgm").read_text().strip() == "ok"
    shown = node.run(
        ["dpkg-query", "-W", "-f=${Status} ${Version}", "datacenter-gpu-manager-exporter"],
        env=SSM_ENV,
    )
    assert shown.stdout == f"install ok installed {nvidia_repo.EXPORTER_VERSION}-1", shown
    assert list(node.path("/etc/apt/sources.list.d").glob("cuda-*.list")) == []
    unit = node.path("/etc/systemd/system/fmctl-dcgm-exporter.service").read_text()
    assert "ExecStart=/usr/bin/dcgm-exporter " in unit and "-r localhost:5555" in unit
    active = node.run(["systemctl", "is-active", "--quiet", "fmctl-dcgm-exporter"], env=SSM_ENV)
    assert active.returncode == 0


def test_dcgm_3_gets_no_packaged_exporter(cluster: Cluster) -> None:
    """On an AMI with DCGM 3 (ParallelCluster before 3.15) the package, which pairs with
    DCGM 4, is not installed: with no container runtime the exporter is missing, and the
    record says why (a warning at bootstrap, reported by `fmctl check`)."""
    node = cluster.compute
    script = ["/bin/bash", "/opt/fmctl/slurm/lib/install-exporter.sh", "dcgm"]
    node.run(["systemctl", "disable", "--now", "fmctl-dcgm-exporter"], env=SSM_ENV)
    node.path("/etc/systemd/system/fmctl-dcgm-exporter.service").unlink()
    node.run(["dpkg", "--purge", "datacenter-gpu-manager-exporter"], env=SSM_ENV)
    node.write("/etc/standin/dcgm-version", "3.3.6\n")
    try:
        done = node.run(script, env=CLOUD_INIT_ENV, timeout=120)
        assert done.returncode != 0
        last = done.stderr.strip().splitlines()[-1]
        assert "DCGM 3.3.6 on this node: NVIDIA's packaged exporter pairs with DCGM 4" in last
        assert "no container runtime" in last
        assert not node.path("/usr/bin/dcgm-exporter").exists()
        assert not node.path("/etc/systemd/system/fmctl-dcgm-exporter.service").exists()
    finally:
        node.path("/etc/standin/dcgm-version").unlink()
        again = node.run(script, env=CLOUD_INIT_ENV, timeout=120)
        assert again.returncode == 0, again.stderr


def test_an_exporter_without_its_host_engine_is_not_running(cluster: Cluster) -> None:
    """With dcgm-exporter installed but nv-hostengine not answering, the exporter would
    restart every 10 s and export nothing: install-exporter.sh says so and installs no unit,
    instead of recording it as running."""
    node = cluster.compute
    script = ["/bin/bash", "/opt/fmctl/slurm/lib/install-exporter.sh", "dcgm"]
    unit = node.path("/etc/systemd/system/fmctl-dcgm-exporter.service")
    node.run(["systemctl", "disable", "--now", "fmctl-dcgm-exporter"], env=SSM_ENV)
    unit.unlink(missing_ok=True)
    assert node.path("/usr/bin/dcgm-exporter").exists()  # the package's, from bootstrap
    diag = node.path("/etc/standin/dcgmi-diag.json")
    saved = diag.read_text()
    diag.unlink()  # the stand-in dcgmi then answers as with no host engine
    try:
        done = node.run(script, env=CLOUD_INIT_ENV, timeout=60)
        assert done.returncode != 0
        assert "host engine (nv-hostengine, nvidia-dcgm.service) does not answer" in done.stderr
        assert not unit.exists()
    finally:
        diag.write_text(saved)
        again = node.run(script, env=CLOUD_INIT_ENV, timeout=120)
        assert again.returncode == 0, again.stderr


def test_containers_enabled_on_head_and_compute(cluster: Cluster) -> None:
    for node in (cluster.head, cluster.compute):
        plugstack = node.path("/opt/slurm/etc/plugstack.conf").read_text()
        assert "include /opt/slurm/etc/plugstack.conf.d/*" in plugstack
        pyxis = node.path("/opt/slurm/etc/plugstack.conf.d/pyxis.conf").read_text()
        assert pyxis.startswith("required /usr/local/lib/slurm/spank_pyxis.so")
        mode = node.run(["stat", "-c", "%a", "/run/enroot"], env=SSM_ENV).stdout.strip()
        assert mode == "1777"
    # srun on the head node loads plugstack.conf: pyxis's option is there for users.
    help_text = cluster.head.run(["/opt/slurm/bin/srun", "--help"], env=SSM_ENV).stdout
    assert "--container-image" in help_text
    conf = cluster.compute.path("/etc/enroot/enroot.conf").read_text()
    assert "ENROOT_DATA_PATH /scratch/enroot/data/user-$(id -u)" in conf


def test_healthy_node_runs_a_job_with_the_nccl_environment(cluster: Cluster) -> None:
    """sbatch as the default user: the real prolog passes on a healthy node (libfabric 2.x:
    96 fi_info entries, 32 devices) and the task prolog gives the batch job FI_PROVIDER."""
    cluster.head.write("/home/ubuntu/env.sh", "#!/bin/bash\nenv | sort\n", 0o755)
    submit = cluster.head.run(
        [
            "/opt/slurm/bin/sbatch",
            "--wait",
            "--chdir=/home/ubuntu",
            "-o",
            "/home/ubuntu/env.out",
            "/home/ubuntu/env.sh",
        ],
        user="ubuntu",
        env={"PATH": "/usr/bin:/bin", "HOME": "/home/ubuntu"},
        timeout=90,
    )
    assert submit.returncode == 0, submit.stderr + cluster.slurm.log()
    out = cluster.compute.path("/home/ubuntu/env.out").read_text()
    assert "FI_PROVIDER=efa" in out
    assert "FI_EFA_USE_DEVICE_RDMA=1" in out  # p5: RDMA read (the catalog's)
    assert cluster.slurm.node_state(_node(cluster)).startswith("IDLE")


def test_cluster_check_through_the_ssm_path(cluster: Cluster) -> None:
    """cluster-check.sh as Run Command runs it on the head node (sh, the agent's PATH): it
    finds the partition's node and brings back its files, 32 EFA devices counted."""
    pool = cluster.config["Scheduling"]["SlurmQueues"][0]["Name"]
    result = cluster.head.run(
        ["/bin/sh", "-c", command_script(["nodes", "--timeout", "60", pool])],
        env=SSM_ENV,
        timeout=120,
    )
    _ok(result)
    frames = re.findall(r"==> fmctl-check (\S+) (\S+) <==", result.stdout)
    assert (_node(cluster), "efa-devices.txt") in frames, result.stdout[-3000:]
    devices = result.stdout.split(f"==> fmctl-check {_node(cluster)} efa-devices.txt <==\n")[1]
    assert len(devices.split("==>")[0].split()) == 32, result.stdout[-4000:]
    assert "dcgm ok" in result.stdout
    # The AMI's nvidia-imex-ctl asked on a p5 node, where IMEX is installed but not running.
    imex = result.stdout.split(f"==> fmctl-check {_node(cluster)} imex.txt <==\n")[1]
    assert imex.startswith("Connection refused"), result.stdout[-3000:]


def test_broken_node_is_drained_with_the_reason(cluster: Cluster) -> None:
    """One EFA device gone: the prolog refuses the job, drains the node and says why (the
    node stays drained for the tests after it)."""
    cluster.compute.write(
        "/etc/standin/fi_info.txt", recorded.fi_info(recorded.p5_domains(32)[:31], 2)
    )
    cluster.head.write("/home/ubuntu/true.sh", "#!/bin/bash\ntrue\n", 0o755)
    submit = cluster.head.run(
        ["/opt/slurm/bin/sbatch", "--parsable", "--chdir=/home/ubuntu", "/home/ubuntu/true.sh"],
        user="ubuntu",
        env={"PATH": "/usr/bin:/bin", "HOME": "/home/ubuntu"},
    )
    assert submit.returncode == 0, submit.stderr
    state = cluster.slurm.wait_state(
        _node(cluster), ("DRAIN", "IDLE+DRAIN", "DOWN+DRAIN"), timeout=60
    )
    assert "DRAIN" in state
    reason = cluster.slurm.scontrol("show", "node", _node(cluster))
    assert "sees 31 EFA devices, expected 32" in reason, reason
    job = submit.stdout.strip().split(";")[0]
    assert "COMPLETED" not in cluster.slurm.scontrol("show", "job", job)
    # The device back, for the tests after (the node stays drained: its reason is Slurm's).
    cluster.compute.write("/etc/standin/fi_info.txt", recorded.fi_info(recorded.p5_domains(32), 2))


def _node(cluster: Cluster) -> str:
    return cluster.slurm.computes[0].name


def test_the_stand_in_is_built_once_and_reused(cluster: Cluster) -> None:
    marker = rootfs.ensure() / ".standin-complete"
    built = marker.stat().st_mtime_ns
    assert rootfs.ensure() / ".standin-complete" == marker
    assert marker.stat().st_mtime_ns == built


def test_the_nccl_job_calls_all_reduce_perf_by_its_path_in_the_image(cluster: Cluster) -> None:
    """No nccl-tests on the node: the job runs the image's binary by its full path (it is
    not on that image's PATH), with the node's NCCL environment, its ranks in the order
    lib/host-order.py reads from the real `scontrol show topology`. srun is a recorder."""
    recorder = (
        '#!/bin/sh\necho "srun $*"\necho "FI_PROVIDER=$FI_PROVIDER RDMA=$FI_EFA_USE_DEVICE_RDMA"\n'
        'echo "hosts: $(cat "$SLURM_HOSTFILE" | wc -l)"\n'
    )
    cluster.compute.write("/usr/local/bin/srun", recorder, 0o755)
    try:
        done = cluster.compute.run(
            ["/bin/bash", "/opt/fmctl/slurm/jobs/nccl-tests.sbatch"],
            env={
                "PATH": "/usr/local/bin:/usr/bin:/bin:/opt/slurm/bin",
                "HOME": "/root",
                "SLURM_JOB_NODELIST": _node(cluster),
                "SLURM_NTASKS_PER_NODE": "8",
            },
        )
    finally:
        cluster.compute.path("/usr/local/bin/srun").unlink()
    _ok(done)
    assert (
        "--container-image=public.ecr.aws/hpc-cloud/nccl-tests:latest "
        "/opt/nccl-tests/build/all_reduce_perf -b 8 -e 16G" in done.stdout
    ), done.stdout
    assert "FI_PROVIDER=efa RDMA=1" in done.stdout
    assert "--distribution=arbitrary --ntasks=8" in done.stdout and "hosts: 8" in done.stdout
    assert f"ranks in network order: {_node(cluster)}" in done.stdout


def test_the_nccl_job_assumes_no_image_on_arm64(cluster: Cluster) -> None:
    """On arm64 (GB200's Grace) the samples' prebuilt image does not run: without a local
    nccl-tests or NCCL_TESTS_IMAGE the job says how to get one and asks nothing of srun; with
    NCCL_TESTS_IMAGE it runs that image. (uname answers aarch64 here: the stand-in is x86.)"""
    node = cluster.compute
    node.write("/usr/local/bin/srun", '#!/bin/sh\necho "srun $*"\n', 0o755)
    node.write("/usr/local/bin/uname", '#!/bin/sh\n[ "$1" = -m ] && echo aarch64\n', 0o755)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/opt/slurm/bin", "HOME": "/root"}
    try:
        done = node.run(["/bin/bash", "/opt/fmctl/slurm/jobs/nccl-tests.sbatch"], env=env)
        assert done.returncode == 2 and "srun" not in done.stdout, done.stdout
        assert "no arm64 nccl-tests image is published" in done.stderr
        own = {**env, "NCCL_TESTS_IMAGE": "123456789012.dkr.ecr.us-east-1.amazonaws.com/nccl:arm"}
        done = node.run(["/bin/bash", "/opt/fmctl/slurm/jobs/nccl-tests.sbatch"], env=own)
        _ok(done)
        assert "--container-image=123456789012.dkr.ecr.us-east-1.amazonaws.com/nccl:arm" in (
            done.stdout
        )
    finally:
        node.path("/usr/local/bin/srun").unlink()
        node.path("/usr/local/bin/uname").unlink()


def test_a_node_of_an_earlier_cluster_still_bootstraps(cluster: Cluster) -> None:
    """`up` uploads this script before ParallelCluster's update lands (or when it is
    refused): compute nodes launched meanwhile run it with the Args an earlier fmctl rendered
    (--enroot-data=DIR, three OnNodeStart arguments). They must still come up."""
    prefix = f"s3://{BUCKET}/llm-pretrain/slurm"
    start = _run_action(cluster.compute, ("actions/on-node-start.sh", ["true", "8", "32"]))
    _ok(start)
    old = ["compute", prefix, "--node-exporter", "--efa-exporter=32", "--enroot-data=/scratch"]
    _ok(_run_action(cluster.compute, ("actions/on-node-configured.sh", old)))
    assert "FMCTL_EFA_RDMA_READ=false" in cluster.compute.path("/etc/fmctl/node.env").read_text()


def test_an_update_brings_the_task_prolog_to_running_nodes(cluster: Cluster) -> None:
    """A cluster that gains TaskProlog on update: the head node's OnNodeUpdated puts it in
    /opt/slurm, which the compute nodes that were already running mount."""
    shared = "/opt/slurm/etc/scripts/fmctl-task-prolog.sh"
    cluster.head.path(shared).unlink()  # as on a cluster made by an earlier fmctl
    assert not cluster.compute.path(shared).exists()
    updated = _action(cluster.config["HeadNode"]["CustomActions"], "OnNodeUpdated")
    _ok(_run_action(cluster.head, updated))
    assert (
        cluster.compute.path(shared).read_text() == (ROOT / "slurm/lib/task-prolog.sh").read_text()
    )
    # As slurmstepd runs it: the job's user, its environment, on the compute node.
    out = cluster.compute.run([shared], user="ubuntu", env={"PATH": "/usr/bin:/bin"})
    _ok(out)
    assert "export FI_PROVIDER=efa" in out.stdout


#: nvidia-dcgm.service as DCGM's packages ship it (NVIDIA/DCGM
#: config-files/systemd/nvidia-dcgm.service.in at 72fa3fe, its binary folder filled in).
NVIDIA_DCGM_UNIT = """[Unit]
Description=NVIDIA DCGM service
After=nvidia-gpu-reset.target
Wants=nvidia-gpu-reset.target

[Service]
User=root
PrivateTmp=false
Environment="DCGM_HOME_DIR=/var/log/nvidia-dcgm"
ExecStart=/usr/bin/nv-hostengine -n --service-account nvidia-dcgm
Restart=on-abort

[Install]
Alias=dcgm.service
WantedBy=multi-user.target
"""


def test_the_gate_with_no_engine_starts_the_nodes_own(cluster: Cluster) -> None:
    """A Slurm node's gate that finds no DCGM host engine answering (early in the boot)
    starts the node's own, nvidia-dcgm.service, where DCGM's package installed it: the one
    engine the exporter and the agent use later (NVIDIA supports one a node). Only without
    the unit does it start a bare nv-hostengine (which daemonizes)."""
    compute = cluster.compute
    diag = compute.path("/etc/standin/dcgmi-diag.json")
    saved = diag.read_text()
    unit = "/etc/systemd/system/nvidia-dcgm.service"
    started = "/run/standin-systemd/nvidia-dcgm.service"
    daemon = "/run/standin/nv-hostengine"

    def exists(path: str) -> bool:
        return compute.run(["test", "-e", path]).returncode == 0

    diag.unlink()
    try:
        compute.write(unit, NVIDIA_DCGM_UNIT)
        with_unit = compute.run(["/bin/bash", "/opt/fmctl/slurm/lib/verify-node.sh"], env=SSM_ENV)
        assert exists(started) and not exists(daemon), with_unit.stdout + with_unit.stderr
        compute.path(unit).unlink()
        compute.run(["rm", "-f", started])
        bare = compute.run(["/bin/bash", "/opt/fmctl/slurm/lib/verify-node.sh"], env=SSM_ENV)
        assert exists(daemon) and not exists(started), bare.stdout + bare.stderr
    finally:
        compute.run(["/bin/sh", "-c", f"pkill -f nv-hostengine; rm -f {daemon} {started} {unit}"])
        compute.write("/etc/standin/dcgmi-diag.json", saved)
        compute.run(["rm", "-rf", "/run/fmctl"])
