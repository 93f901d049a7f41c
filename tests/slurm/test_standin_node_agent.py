"""fmctl's node health agent for EKS (templates/kubernetes/health-verify/node_agent.py, issue
33) on a stand-in node, as its DaemonSet runs it: the files of its rendered ConfigMap at
their mount path, the rendered container's command and exactly its env (plus the python
image's PATH, which the container runtime gives), the node's stand-in nvidia-smi answering
from recorded real outputs, its EFA devices in sysfs at the DaemonSet's /host/sys, and the
kernel's records of a recorded real Xid 79 in /dev/kmsg's format. It reports to a loopback
API server standing in for the cluster's (what it PATCHes is what is asserted).

Two departures, both forced by the stand-in: the kernel's records are a file (the node's
/dev is the machine's, whose real /dev/kmsg a test must not read), given with --kmsg after
the DaemonSet's arguments; and the API is plain HTTP on loopback, given with --server, as
the sandbox gives it (in a pod the kubernetes Service's address and its CA). The stand-in's
root is Debian 13 with gawk where the python image has Debian's mawk: both are POSIX awk,
which is all health-detect.sh asks.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from tests.conftest import ROOT
from tests.render.helpers import documents, rendered
from tests.tools.standin import rootfs
from tests.tools.standin.node import StandinNode

pytestmark = rootfs.required()
REAL = ROOT / "tests" / "data" / "real"
HEALTHY_GPUS = (ROOT / "tests/data/check/nvidia-smi-healthy.csv").read_text()
NODE = "ip-10-0-18-61.ec2.internal"
#: The official python image's PATH (its Dockerfile: `ENV PATH /usr/local/bin:$PATH` over
#: Debian's default), which the container runtime gives the container's process.
IMAGE_PATH = "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"
ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
#: Where the stand-in's nvidia-smi is (the driver's place on the host, which the NVIDIA
#: runtime mounts into a container that asks for its utilities).
NVIDIA_SMI = "/usr/bin/nvidia-smi"


class Recorder(BaseHTTPRequestHandler):
    """The cluster's API as far as the agent calls it: records each request."""

    seen: ClassVar[list[tuple[str, str, str, Any]]] = []

    def do_PATCH(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(
            (self.path, self.headers["Content-Type"], self.headers["Authorization"], body)
        )
        answer = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _shipped(tmp_path: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """What `up` ships for the p5en EKS example with the agent: its ConfigMap's files and
    the gpu pool's DaemonSet's agent container."""
    files, containers = _shipped_pod(tmp_path)
    return files, containers["agent"]


def _shipped_pod(tmp_path: Path) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """The agent's ConfigMap's files and its DaemonSet's containers by name."""
    data = yaml.safe_load((ROOT / "examples/p5en-eks-fsx-s3.yaml").read_text())
    data.setdefault("health", {})["kubernetesAgent"] = True
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    files = rendered(spec, "kubernetes").files
    docs = [d for _, d in documents(files, "kubernetes/health-verify/") if "metadata" in d]
    (shipped,) = [
        d["data"]
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "fmctl-health-agent"
    ]
    (daemonset,) = [d for d in docs if d["metadata"]["name"] == "fmctl-health-agent-gpu"]
    containers = daemonset["spec"]["template"]["spec"]["containers"]
    # The node's one DCGM host engine (templates/kubernetes/dcgm), which the dcgm container
    # is a client of.
    (engine,) = [
        d
        for _, d in documents(files, "kubernetes/dcgm/")
        if d.get("kind") == "DaemonSet" and d["metadata"]["name"] == "dcgm-hostengine"
    ]
    containers += engine["spec"]["template"]["spec"]["containers"]
    return shipped, {c["name"]: c for c in containers}


def _records(lines: list[str]) -> str:
    """Kernel lines as /dev/kmsg gives them (PRIO,SEQ,USEC,FLAGS;TEXT)."""
    return "".join(f"3,{seq},{seq * 1000},-;{text}\n" for seq, text in enumerate(lines, 1))


def test_the_shipped_agent_reports_a_recorded_xid_from_the_node(tmp_path: Path, api: str) -> None:
    files, container = _shipped(tmp_path)
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert [e["name"] for e in container["env"] if "valueFrom" in e] == ["NODE_NAME"]
    env |= {"NODE_NAME": NODE, "PATH": IMAGE_PATH}
    node = StandinNode(rootfs.ensure(), "ip-10-0-18-61")
    try:
        for name, text in files.items():
            node.write(f"/opt/fmctl/lib/{name}", text)
        # The pod's token where the kubelet mounts it (/var/run is the node's own /run).
        made = node.run(
            ["/bin/sh", "-c", f"mkdir -p {ACCOUNT} && printf agent-token > {ACCOUNT}/token"],
            env={"PATH": IMAGE_PATH},
        )
        assert made.returncode == 0, made.stderr
        node.write("/etc/standin/nvidia-smi.csv", HEALTHY_GPUS)
        # The node's EFA devices where the DaemonSet mounts the host's /sys (p5en: 16).
        expected = int(env["FMCTL_EXPECTED_EFA"])
        for index in range(expected):
            device = f"{env['FMCTL_SYSFS']}/class/infiniband/rdmap{index}s0"
            node.write(f"{device}/device/vendor", "0x1d0f\n")
            node.write(f"{device}/device/device", "0xefa1\n")
            node.write(f"{device}/ports/1/hw_counters/rx_drops", "0\n")
        node.write("/var/lib/standin/kmsg", "")
        run = [
            *container["command"],
            "--once",
            "--kmsg=/var/lib/standin/kmsg",
            f"--server={api}",
        ]

        def report() -> dict[str, Any]:
            Recorder.seen.clear()
            done = node.run(run, env=env)
            assert done.returncode == 0, done.stdout + done.stderr
            ((path, ctype, auth, body),) = Recorder.seen
            assert path == f"/api/v1/nodes/{NODE}/status"
            assert ctype == "application/strategic-merge-patch+json"
            assert auth == "Bearer agent-token"
            (condition,) = body["status"]["conditions"]
            assert condition["type"] == "FmctlHealthy"
            return dict(condition)

        healthy = report()
        assert (healthy["status"], healthy["message"]) == ("True", "no node-level fault"), healthy
        # Its series, where the node exporter's textfile collector reads them.
        prom = node.path("/var/lib/fmctl/metrics/fmctl-health.prom").read_text()
        assert 'fmctl_node_health_state{state="healthy"} 1' in prom

        # A GPU falls off the bus: the driver's recorded lines in the kernel's log.
        lines = (REAL / "kernel-xid79-open-gpu-kernel-modules-1151.txt").read_text()
        texts = [line.split("kernel: ", 1)[1] for line in lines.splitlines()]
        node.write("/var/lib/standin/kmsg", _records(texts))
        faulty = report()
        assert faulty["status"] == "False" and faulty["reason"] == "RESTART_BM"
        assert faulty["message"] == "fmctl-health: XID 79 RESTART_BM -> reboot; jobs: requeue"

        # One EFA device gone (the Xid's fault, kept for the boot, removed first: the agent
        # reports the first node-level fault it found).
        node.path("/var/lib/fmctl/health/fault").unlink()
        gone = node.path(f"{env['FMCTL_SYSFS']}/class/infiniband/rdmap{expected - 1}s0")
        for path in sorted(gone.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        gone.rmdir()
        missing = report()
        assert missing["reason"] == "EFA_MISSING", missing
        assert f"({expected - 1} of {expected} EFA devices)" in missing["message"]

        # No nvidia-smi in the container (the runtime did not add it): Unknown, not a fault.
        node.path("/var/lib/fmctl/health/fault").unlink()
        (gone / "device").mkdir(parents=True)
        (gone / "device/vendor").write_text("0x1d0f\n")
        (gone / "device/device").write_text("0xefa1\n")
        tool = node.path(NVIDIA_SMI)
        tool.rename(tool.with_name("nvidia-smi.away"))
        unknown = report()
        assert unknown["status"] == "Unknown", unknown
        assert "nvidia-smi is not in the container" in unknown["message"]
    finally:
        node.stop()


#: A PATH with /usr/bin, where DCGM's packages put dcgmi and nv-hostengine (the DCGM image's
#: own PATH holds it: the verify gate's Job finds dcgmi there by name).
DCGM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def test_the_shipped_dcgm_container_gives_the_agent_dcgms_watches(tmp_path: Path, api: str) -> None:
    """The agent's image has no dcgmi: the DaemonSet's dcgm container, as shipped (its
    command and env), waits for the node's one host engine (the dcgm-hostengine DaemonSet's
    container, as shipped) and starts none of its own, turns the watches on and writes their
    answer (here a recorded Failure of the memory system) where the agent reads it; the
    agent reports the node faulty. An answer that stopped coming is not read."""
    files, containers = _shipped_pod(tmp_path)
    agent, dcgm, engine = containers["agent"], containers["dcgm"], containers["nv-hostengine"]
    env = {e["name"]: e["value"] for e in agent["env"] if "value" in e}
    env |= {"NODE_NAME": NODE, "PATH": IMAGE_PATH}
    report_path = env["FMCTL_DCGM_REPORT"]
    (mount,) = [m for m in dcgm["volumeMounts"] if m["name"] == "dcgm"]
    assert report_path.startswith(mount["mountPath"] + "/")
    node = StandinNode(rootfs.ensure(), "ip-10-0-18-61")
    try:
        for name, text in files.items():
            node.write(f"/opt/fmctl/lib/{name}", text)
        made = node.run(
            [
                "/bin/sh",
                "-c",
                f"mkdir -p {ACCOUNT} {mount['mountPath']} && printf t > {ACCOUNT}/token",
            ],
            env={"PATH": IMAGE_PATH},
        )
        assert made.returncode == 0, made.stderr
        node.write("/etc/standin/nvidia-smi.csv", HEALTHY_GPUS)
        node.write(
            "/etc/standin/dcgmi-health.json",
            (ROOT / "tests/data/check/dcgmi-health-fail.json").read_text(),
        )
        for index in range(int(env["FMCTL_EXPECTED_EFA"])):  # the node's EFA devices
            device = f"{env['FMCTL_SYSFS']}/class/infiniband/rdmap{index}s0"
            node.write(f"{device}/device/vendor", "0x1d0f\n")
            node.write(f"{device}/device/device", "0xefa1\n")
        node.write("/var/lib/standin/kmsg", "")
        dcgm_env = {e["name"]: e.get("value", "") for e in dcgm.get("env", [])}
        watch = node.daemon(dcgm["command"], env=dcgm_env | {"PATH": DCGM_PATH})

        def written() -> bool:
            # /run is the node's own tmpfs, seen from inside it only.
            return node.run(["test", "-s", report_path], env={"PATH": DCGM_PATH}).returncode == 0

        def engine_runs() -> bool:
            return node.run(["test", "-e", "/run/standin/nv-hostengine"]).returncode == 0

        # No engine on the node yet: the container waits, and starts none of its own.
        time.sleep(3)
        assert not written() and not engine_runs() and watch.poll() is None
        engine_env = {e["name"]: e["value"] for e in engine["env"]} | {"PATH": DCGM_PATH}
        node.daemon(engine["command"], env=engine_env)
        deadline = time.monotonic() + 30
        while not written() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert written(), "the dcgm container wrote no answer"
        assert node.path("/etc/standin/dcgmi-health-watches").exists()  # it turned them on
        run = [*agent["command"], "--once", "--kmsg=/var/lib/standin/kmsg", f"--server={api}"]

        def report() -> dict[str, Any]:
            Recorder.seen.clear()
            done = node.run(run, env=env)
            assert done.returncode == 0, done.stdout + done.stderr
            ((_, _, _, body),) = Recorder.seen
            (condition,) = body["status"]["conditions"]
            return dict(condition)

        faulty = report()
        assert (faulty["status"], faulty["reason"]) == ("False", "DCGM_HEALTH_FAILURE"), faulty
        assert faulty["message"] == (
            "fmctl-health: DCGM_HEALTH_FAILURE (Memory system: Failure) -> replace; jobs: finish"
        )
        # The container ended: its last answer grows old and is not read any more.
        watch.terminate()
        watch.wait(timeout=30)
        assert watch.poll() is not None
        old = int(time.time()) - int(env["FMCTL_DCGM_REPORT_MAX_AGE"]) - 5
        aged = node.run(["touch", "-d", f"@{old}", report_path], env={"PATH": DCGM_PATH})
        assert aged.returncode == 0, aged.stderr
        node.path("/var/lib/fmctl/health/fault").unlink()
        healthy = report()
        assert (healthy["status"], healthy["message"]) == ("True", "no node-level fault"), healthy
    finally:
        node.stop()
