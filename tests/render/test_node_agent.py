"""fmctl's node health agent on EKS (templates/kubernetes/health-verify/node_agent.py), pass
by pass: the kernel's records as /dev/kmsg gives them, health-detect.sh (the Slurm agent's
looks) run on the recorded outputs of a p5en, and the node condition it writes
(tests/engine/test_health_agent.py runs it against the sandbox, as its DaemonSet does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.check import fakes
from tests.render.helpers import program

ROOT = Path(__file__).resolve().parents[2]
REAL, DATA = ROOT / "tests/data/real", ROOT / "tests/data/check"
LIB = ROOT / "slurm/lib"


na = program("node_agent")

#: nvidia-smi as a healthy p5en answers the agent's looks (recorded outputs), or, with
#: $FAKE/lost, one GPU gone.
NVIDIA_SMI = """#!/bin/bash
csv="$DATA/nvidia-smi-p5en.csv"
[ ! -e "$FAKE/lost" ] || csv="$DATA/nvidia-smi-lost-gpu.csv"
case "$*" in
  "--query-gpu=index --format=csv,noheader") awk -F', ' '{print $1}' "$csv" ;;
  "nvlink -s") cat "$DATA/nvidia-smi-nvlink-p5-healthy.txt" ;;
  "-q -d ROW_REMAPPER") cat "$REAL/nvidia-smi-q-remapped-rows-h100x8.txt" ;;
  *) cat "$csv" ;;
esac
"""


class Api:
    """Records what the agent asks of the API."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any, str]] = []

    def call(self, method: str, path: str, body: Any = None, ctype: str = "") -> Any:
        self.calls.append((method, path, body, ctype))
        return {}


def _records(lines: list[str], first: int = 1) -> str:
    """Lines as /dev/kmsg gives them: PRIO,SEQ,USEC,FLAGS;TEXT, a continuation line after
    each (the device's KEY=value)."""
    out = []
    for seq, line in enumerate(lines, first):
        out.append(f"3,{seq},{1000 * seq},-;{line}")
        out.append(" SUBSYSTEM=pci")
    return "\n".join(out) + "\n"


def _kernel(name: str) -> list[str]:
    """A recorded kernel log's messages (after its timestamp and `kernel:` prefix)."""
    out = []
    for line in (REAL / name).read_text().splitlines():
        _, sep, text = line.partition("kernel: ")
        if not sep:
            _, sep, text = line.partition("] ")
        out.append(text)
    return out


def _agent(tmp_path: Path, monkeypatch: Any, tools: bool = True) -> tuple[Any, Api, Path]:
    """An agent of a p5en node (8 GPUs; its EFA looked at in tests of health-detect.sh)."""
    bin_dir = fakes.install(tmp_path / "bin", {"nvidia-smi": NVIDIA_SMI}) if tools else None
    env = {
        "DATA": str(DATA),
        "REAL": str(REAL),
        "FAKE": str(tmp_path),
        "PATH": (f"{bin_dir}:" if bin_dir else "") + "/usr/bin:/bin",
        "FMCTL_EXPECTED_GPUS": "8",
        "FMCTL_SYSFS": str(tmp_path / "sys"),
        "FMCTL_EFA_ENABLED": "false",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    kmsg, boot = tmp_path / "kmsg", tmp_path / "boot_id"
    kmsg.write_text("")
    boot.write_text("boot-1\n")
    state = tmp_path / "state"
    state.mkdir()
    api = Api()
    agent = na.Agent(api, "ip-10-0-1-5", LIB, state, kmsg, boot)
    agent.say = lambda line: None
    return agent, api, kmsg


def _conditions(api: Api) -> list[dict[str, str]]:
    out = []
    for method, path, body, ctype in api.calls:
        assert (method, path) == ("PATCH", "/api/v1/nodes/ip-10-0-1-5/status")
        assert ctype == "application/strategic-merge-patch+json"
        (condition,) = body["status"]["conditions"]
        out.append(condition)
    return out


def test_kmsg_records_are_read_once_by_their_sequence(tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(_records(["one", "two", "three"]))
    lines, last = na.read_kmsg(kmsg, -1)
    assert (lines, last) == (["one", "two", "three"], 3)
    assert na.read_kmsg(kmsg, 2) == (["three"], 3)
    assert na.read_kmsg(kmsg, 3) == ([], 3)


def test_a_fatal_xid_makes_the_node_unhealthy_until_it_goes(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Xid 79 in the kernel's log (a recorded real one): False, reason its class, message
    the Slurm agent's drain reason with what becomes of the jobs; it stays so on later
    passes (the Xid is not seen again) and across the agent's restarts this boot."""
    agent, api, kmsg = _agent(tmp_path, monkeypatch)
    agent.run_pass()
    assert _conditions(api)[-1]["status"] == "True"
    kmsg.write_text(_records(_kernel("kernel-xid79-open-gpu-kernel-modules-1151.txt")))
    agent.run_pass()
    condition = _conditions(api)[-1]
    assert condition["status"] == "False" and condition["reason"] == "RESTART_BM"
    assert condition["message"] == "fmctl-health: XID 79 RESTART_BM -> reboot; jobs: requeue"
    assert "lastTransitionTime" in condition
    calls = len(api.calls)
    agent.run_pass()
    assert len(api.calls) == calls  # unchanged: not written again before its heartbeat
    again = na.Agent(api, "ip-10-0-1-5", LIB, agent.state, kmsg, agent.boot_id)
    again.say = lambda line: None
    again.run_pass()
    assert _conditions(api)[-1]["status"] == "False"  # a restarted agent still says so
    agent.boot_id.write_text("boot-2\n")  # a new boot (the node came back): looked at anew
    kmsg.write_text("")
    again.run_pass()
    assert _conditions(api)[-1]["status"] == "True"


def test_application_xids_are_only_counted(tmp_path: Path, monkeypatch: Any) -> None:
    agent, api, kmsg = _agent(tmp_path, monkeypatch)
    lines = _kernel("kernel-xid13-109-gpud.txt")
    kmsg.write_text(_records([line for line in lines if "): 13," in line]))
    agent.run_pass()
    condition = _conditions(api)[-1]
    assert condition["status"] == "True"
    assert "counted: xid:13 RESTART_APP" in condition["message"]


def test_a_gpu_gone_and_no_nvidia_smi(tmp_path: Path, monkeypatch: Any) -> None:
    """7 of 8 GPUs: GPU_MISSING; no nvidia-smi in the container (the runtime did not add
    it): Unknown, never a fault."""
    agent, api, _ = _agent(tmp_path, monkeypatch)
    (tmp_path / "lost").touch()
    agent.run_pass()
    condition = _conditions(api)[-1]
    assert condition["status"] == "False" and condition["reason"] == "GPU_MISSING"
    assert condition["message"].startswith("fmctl-health: GPU_MISSING (7 of 8 GPUs) -> replace")
    other = tmp_path / "other"
    other.mkdir()
    agent, api, _ = _agent(other, monkeypatch, tools=False)
    agent.run_pass()
    condition = _conditions(api)[-1]
    assert (
        condition["status"] == "Unknown"
        and "nvidia-smi is not in the container" in (condition["message"])
    )


def test_efa_devices_are_counted_in_sysfs_without_libfabric(tmp_path: Path) -> None:
    """In the agent's container (no fi_info) health-detect.sh counts the EFA devices in
    sysfs: vendor 0x1d0f, device 0xefa* (other RDMA devices are not EFA)."""
    import subprocess

    for name, vendor, device in (("rdmap0", "0x1d0f", "0xefa1"), ("mlx5_0", "0x15b3", "0x101b")):
        folder = tmp_path / "sys/class/infiniband" / name / "device"
        folder.mkdir(parents=True)
        (folder / "vendor").write_text(vendor + "\n")
        (folder / "device").write_text(device + "\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "FMCTL_HEALTH_DIR": str(tmp_path / "state"),
        "FMCTL_KERNEL_LOG": "/dev/null",
        "FMCTL_SYSFS": str(tmp_path / "sys"),
        "FMCTL_EFA_ENABLED": "true",
        "FMCTL_EFA_FROM_SYSFS": "true",
    }
    run = ["bash", str(LIB / "health-detect.sh")]
    done = subprocess.run(
        run, env={**env, "FMCTL_EXPECTED_EFA": "2"}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "efa-count\t1 of 2 EFA devices\n"
    done = subprocess.run(
        run, env={**env, "FMCTL_EXPECTED_EFA": "1"}, capture_output=True, text=True
    )
    assert (done.returncode, done.stdout) == (0, "")


def test_its_series_for_the_node_exporter(tmp_path: Path, monkeypatch: Any) -> None:
    """With --metrics, the Slurm agent's series in node_exporter's textfile format: the
    state, and every fault counted by code and class."""
    agent, _, kmsg = _agent(tmp_path, monkeypatch)
    agent.metrics = tmp_path / "metrics"
    agent.run_pass()
    text = (agent.metrics / "fmctl-health.prom").read_text()
    assert 'fmctl_node_health_state{state="healthy"} 1' in text
    assert "fmctl_node_faults_total{" not in text
    lines = _kernel("kernel-xid13-109-gpud.txt")
    kmsg.write_text(_records(lines))
    agent.run_pass()
    text = (agent.metrics / "fmctl-health.prom").read_text()
    assert 'fmctl_node_faults_total{code="xid:13",class="RESTART_APP"} 3' in text
    # Xid 109 (CTX SWITCH TIMEOUT) is node-level in NVIDIA's catalog: faulty now.
    assert 'fmctl_node_health_state{state="faulty"} 1' in text
    assert "# TYPE fmctl_node_faults_total counter" in text
    assert not list(agent.metrics.glob("*.tmp"))


def test_a_lasting_fault_counts_once_and_a_kernel_line_each_time(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """fmctl_node_faults_total counts faults, not looks: a GPU off the bus (the recorded
    nvidia-smi that lists 7) seen pass after pass counts once, again only when it comes
    back after it was gone; each kernel line counts once, whenever it is read."""
    agent, _, kmsg = _agent(tmp_path, monkeypatch)
    agent.metrics = tmp_path / "metrics"

    def counted(code: str, fault_class: str) -> int:
        text = (agent.metrics / "fmctl-health.prom").read_text()
        mark = f'fmctl_node_faults_total{{code="{code}",class="{fault_class}"}} '
        line = next((x for x in text.splitlines() if x.startswith(mark)), mark + "0")
        return int(line.removeprefix(mark))

    (tmp_path / "lost").write_text("")
    for _ in range(3):
        agent.run_pass()
    assert counted("gpu-count", "GPU_MISSING") == 1
    (tmp_path / "lost").unlink()
    agent.run_pass()
    (tmp_path / "lost").write_text("")
    agent.run_pass()
    assert counted("gpu-count", "GPU_MISSING") == 2
    kmsg.write_text(_records(_kernel("kernel-xid13-109-gpud.txt")))
    agent.run_pass()
    agent.run_pass()
    assert counted("xid:13", "RESTART_APP") == 3
    # Kept across the agent's restarts: a new agent on the same state folder goes on.
    again, _, _ = _agent(tmp_path / "again", monkeypatch)
    again.state, again.metrics = agent.state, agent.metrics
    again.run_pass()
    assert counted("gpu-count", "GPU_MISSING") == 2


def test_the_table_says_what_is_counted_once(tmp_path: Path, monkeypatch: Any) -> None:
    """Whether a fault counts at each pass that finds it or once while it lasts is the fault
    table's ``seen`` column, not the agent's: the same lost GPU in a table that calls it an
    event counts at every pass; an Xid the table does not know is a kernel line, counted
    each time it is read."""
    import shutil

    lib = tmp_path / "lib"
    shutil.copytree(LIB, lib)
    table = lib / "faults.tsv"
    table.write_text(
        table.read_text().replace(
            "gpu-count\tGPU_MISSING\treplace\trequeue\tstate",
            "gpu-count\tGPU_MISSING\treplace\trequeue\tevent",
        )
    )
    agent, _, kmsg = _agent(tmp_path, monkeypatch)
    agent.table = na.load_table(table)
    agent.metrics = tmp_path / "metrics"  # the agent counts for its series
    assert agent.table["gpu-count"].seen == "event"
    (tmp_path / "lost").write_text("")
    for _ in range(3):
        agent.run_pass()
    counts = (agent.state / "counts").read_text()
    assert "gpu-count GPU_MISSING 3\n" in counts, counts
    (tmp_path / "lost").unlink()
    # In the recorded lines' form (kernel-xid13-109-gpud.txt), with a code past the catalog.
    unknown = "NVRM: Xid (PCI:0000:53:00): 999, pid=1, name=python3, a code not in the catalog"
    kmsg.write_text(_records([unknown]))
    agent.run_pass()
    kmsg.write_text(_records([unknown, unknown], first=2))
    agent.run_pass()
    counts = (agent.state / "counts").read_text()
    assert "xid:999 UNKNOWN 3\n" in counts, counts
