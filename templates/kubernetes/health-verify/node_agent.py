"""fmctl's node health agent on an EKS GPU node (issue 33): the Slurm agent's eyes, reporting
to Kubernetes.

A DaemonSet (``health.kubernetesAgent``) runs it on every GPU node. Every ``--interval``
seconds it:

- reads the kernel's new records from ``/dev/kmsg`` (the kernel's dev-kmsg ABI,
  Documentation/ABI/testing/dev-kmsg: one record a read, ``PRIO,SEQ,USEC,FLAGS;TEXT``,
  continuation lines starting with a space, EAGAIN at the end when opened non-blocking,
  EPIPE when records were overwritten), keeping the last sequence number seen per boot in
  its state folder (a host path), so a line counts once across the agent's restarts;
- runs ``health-detect.sh``, the Slurm agent's own looks (GPUs, NVLinks, row remapping,
  EFA devices and error counters, DCGM's health watches where ``dcgmi`` is present), with
  those lines as the kernel's log;
- decides by fmctl's fault table (``faults.tsv``, provisioner/catalog/faults.py) and says
  so in the node condition ``FmctlHealthy``: ``False`` for a node-level fault (reason its
  class, message ``fmctl-health: XID 79 RESTART_BM -> replace; jobs: requeue``), ``True``
  otherwise (application-class faults are only counted, in the message), ``Unknown`` when
  it cannot look (nvidia-smi missing in its container);
- with ``--metrics DIR``, writes the Slurm agent's series there for node_exporter's textfile
  collector: ``fmctl_node_health_state`` (healthy, faulty, unchecked) and
  ``fmctl_node_faults_total{code,class}``.

A node-level fault stays reported until the node goes (as a Slurm node the agent drained
stays drained): its state file keeps it for the boot. Taking the node out of service and
replacing it is the verify controller's (verify_controller.py), within the pool's repair
budget, as a detector's report goes to node auto repair.

Standard library only; the API through the pod's service account (``kube_call``).
``--once`` makes one pass.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kube_call import ACCOUNT, Api, run_passes, server_url

#: The node condition the agent keeps.
CONDITION = "FmctlHealthy"
#: A condition that did not change is written again every this many passes (5 minutes at
#: the default 30 s), so its heartbeat says the agent is alive, and an agent whose API has
#: gone for good finds out (GIVE_UP).
HEARTBEAT_PASSES = 10
#: How long one run of health-detect.sh may take (each of its looks has its own timeout).
DETECT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Row:
    """One row of the fault table: what a fault is, what is done about it and how it is
    counted (``seen``: ``event``, new each time it is found, or ``state``, once while it
    lasts)."""

    fault_class: str
    action: str
    jobs: str
    seen: str = "state"


@dataclass(frozen=True)
class Fault:
    """One fault health-detect.sh found, with its row."""

    code: str
    detail: str
    row: Row

    @property
    def node_level(self) -> bool:
        """Does it take the node out of service (the table's action is not ``none``)?"""
        return self.row.action != "none" and self.code != "unchecked"

    @property
    def event(self) -> bool:
        """Is it found anew each time (a kernel line, read once; an EFA error counter's rise
        since the last pass) rather than a state that lasts? The table's ``seen``."""
        return self.row.seen == "event"

    def reason(self) -> str:
        """As the Slurm agent writes a drain's reason (users grep for it)."""
        if self.code.startswith("xid:"):
            said = f"XID {self.code[4:]} {self.row.fault_class}"
        else:
            said = f"{self.row.fault_class} ({self.detail})"
        return f"fmctl-health: {said} -> {self.row.action}; jobs: {self.row.jobs}"


def load_table(path: Path) -> dict[str, Row]:
    """faults.tsv: ``code<TAB>class<TAB>action<TAB>jobs<TAB>seen`` (``#`` lines are
    comments)."""
    table: dict[str, Row] = {}
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        code, fault_class, action, *rest = [*line.split("\t"), "", ""][:5]
        jobs, seen = rest
        table[code] = Row(fault_class, action, jobs or "finish", seen or "state")
    return table


def row_of(table: dict[str, Row], code: str) -> Row:
    """The row for ``code``; an Xid the table does not know is replaced, its jobs left to
    finish (NVIDIA's catalog on an unexpected one), and counted as the kernel line it is, as
    the Slurm agent does."""
    if code == "unchecked":
        return Row("UNCHECKED", "none", "finish")
    return table.get(code, Row("UNKNOWN", "replace", "finish", "event"))


def read_kmsg(path: Path, after: int) -> tuple[list[str], int]:
    """The text of the records after sequence number ``after``, and the last number read.

    The device gives one record a read; a plain file (a test's, the sandbox's) gives many:
    both are split into lines here."""
    texts: list[str] = []
    last = after
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break  # EAGAIN: no more records
            except OSError as err:
                if err.errno == errno.EPIPE:
                    continue  # records overwritten before they were read: go on
                raise
            if not chunk:
                break
            for line in chunk.decode(errors="replace").splitlines():
                head, sep, text = line.partition(";")
                if not sep or line.startswith(" "):
                    continue  # a continuation line (KEY=value) or not a record
                fields = head.split(",")
                try:
                    seq = int(fields[1])
                except (IndexError, ValueError):
                    continue
                if seq > after:
                    texts.append(text)
                    last = max(last, seq)
    finally:
        os.close(fd)
    return texts, last


class Agent:
    """One node's agent: where it reads and keeps things, and the API it reports to."""

    def __init__(
        self,
        api: Api,
        node: str,
        scripts: Path,
        state: Path,
        kmsg: Path,
        boot_id: Path,
        metrics: Path | None = None,
    ) -> None:
        self.api = api
        self.node = node
        self.scripts = scripts
        self.state = state
        self.kmsg = kmsg
        self.boot_id = boot_id
        #: Where node_exporter's textfile collector reads (None: no metrics).
        self.metrics = metrics
        self.table = load_table(scripts / "faults.tsv")
        #: The condition as last written, and passes since.
        self.written: dict[str, str] | None = None
        self.passes = 0

    def say(self, line: str) -> None:
        """A line of the agent's log."""
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        print(f"{stamp} {self.node}: {line}", flush=True)

    def boot(self) -> str:
        """This boot's id (a new boot starts the kernel's sequence numbers again)."""
        try:
            return self.boot_id.read_text().strip()
        except OSError:
            return ""

    def kernel_lines(self) -> list[str]:
        """The kernel's lines since the last pass (this boot's)."""
        cursor = self.state / "kmsg.cursor"
        boot = self.boot()
        after = -1
        try:
            was_boot, was_seq = cursor.read_text().split()
            if was_boot == boot:
                after = int(was_seq)
        except (OSError, ValueError):
            pass
        lines, last = read_kmsg(self.kmsg, after)
        cursor.write_text(f"{boot} {last}\n")
        return lines

    def detect(self) -> list[Fault]:
        """health-detect.sh's faults, with their rows."""
        new = self.state / "kernel.new"
        new.write_text("".join(f"{line}\n" for line in self.kernel_lines()))
        env = {
            **os.environ,
            "FMCTL_KERNEL_LOG": str(new),
            "FMCTL_HEALTH_DIR": str(self.state),
            "FMCTL_IN_CONTAINER": "true",
            "FMCTL_EFA_FROM_SYSFS": "true",
        }
        done = subprocess.run(
            ["bash", str(self.scripts / "health-detect.sh")],
            env=env,
            capture_output=True,
            text=True,
            timeout=DETECT_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            raise OSError(f"health-detect.sh exited {done.returncode}: {done.stderr.strip()}")
        faults = []
        for line in done.stdout.splitlines():
            code, _, detail = line.partition("\t")
            if code:
                faults.append(Fault(code, detail, row_of(self.table, code)))
        return faults

    def held(self) -> tuple[str, str]:
        """The node-level fault found earlier this boot: its class and reason ("" when
        none)."""
        try:
            boot, fault_class, reason = (self.state / "fault").read_text().split("\n")[:3]
        except (OSError, ValueError):
            return "", ""
        return (fault_class, reason) if boot == self.boot() and reason else ("", "")

    def condition(self, faults: list[Fault]) -> dict[str, str]:
        """The node's ``FmctlHealthy`` condition after this pass's faults."""
        fault = next((f for f in faults if f.node_level), None)
        fault_class, held = self.held()
        if fault is not None and not held:
            fault_class, held = fault.row.fault_class, fault.reason()
            (self.state / "fault").write_text(f"{self.boot()}\n{fault_class}\n{held}\n")
            self.say(held)
        counted = [f for f in faults if not f.node_level and f.code != "unchecked"]
        for f in counted:
            self.say(f"counted: {f.code} {f.row.fault_class} ({f.detail})")
        if held:
            return {"status": "False", "reason": fault_class, "message": held}
        unchecked = next((f for f in faults if f.code == "unchecked"), None)
        if unchecked is not None:
            return {"status": "Unknown", "reason": "Unchecked", "message": unchecked.detail}
        message = "no node-level fault"
        if counted:
            message += "; counted: " + ", ".join(f"{f.code} {f.row.fault_class}" for f in counted)
        return {"status": "True", "reason": "NoFault", "message": message}

    def report(self, condition: dict[str, str]) -> None:
        """Write the condition when it changed, or for its heartbeat."""
        self.passes += 1
        if condition == self.written and self.passes < HEARTBEAT_PASSES:
            return
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {"type": CONDITION, **condition, "lastHeartbeatTime": stamp}
        if self.written is None or condition["status"] != self.written["status"]:
            body["lastTransitionTime"] = stamp
        # The status subresource, a strategic merge by the condition's type: the kubelet's
        # and other agents' conditions stay as they are.
        self.api.call(
            "PATCH",
            f"/api/v1/nodes/{self.node}/status",
            {"status": {"conditions": [body]}},
            "application/strategic-merge-patch+json",
        )
        self.written, self.passes = condition, 0

    def run_pass(self) -> None:
        """Look once and report (the condition, and the metrics where asked)."""
        faults = self.detect()
        condition = self.condition(faults)
        if self.metrics is not None:
            self.write_metrics(faults, condition)
        self.report(condition)

    def count(self, faults: list[Fault]) -> dict[tuple[str, str], int]:
        """Every fault seen on the node so far, by code and class, kept in the state folder
        (``counts``: a line per code and class with its number). A kernel line or an EFA
        counter's rise is new each pass it is found, and counts each time; a state (GPUs
        missing, a link down) counts once when it appears, not once a pass while it lasts
        (the last pass's states: ``present``)."""
        counts, present = self.state / "counts", self.state / "present"
        seen: dict[tuple[str, str], int] = {}
        if counts.exists():
            for line in counts.read_text().splitlines():
                code, fault_class, number = [*line.split(" "), "1"][:3]
                seen[(code, fault_class)] = seen.get((code, fault_class), 0) + int(number)
        before = set(present.read_text().split()) if present.exists() else set()
        states = {f.code for f in faults if f.code != "unchecked" and not f.event}
        for f in faults:
            if f.code != "unchecked" and (f.event or f.code not in before):
                key = (f.code, f.row.fault_class)
                seen[key] = seen.get(key, 0) + 1
        counts.write_text("".join(f"{c} {k} {n}\n" for (c, k), n in sorted(seen.items())))
        present.write_text("".join(f"{code}\n" for code in sorted(states)))
        return seen

    def write_metrics(self, faults: list[Fault], condition: dict[str, str]) -> None:
        """The Slurm agent's series, for node_exporter's textfile collector (the file
        replaced whole, as the collector wants): ``fmctl_node_health_state`` (healthy,
        faulty, unchecked: 1 for the current) and ``fmctl_node_faults_total{code,class}``
        (every fault seen, kept in the state folder across restarts)."""
        assert self.metrics is not None
        seen = self.count(faults)
        current = {"True": "healthy", "False": "faulty"}.get(condition["status"], "unchecked")
        lines = [
            "# HELP fmctl_node_health_state fmctl's health agent: the node's state (1 for the "
            "current).",
            "# TYPE fmctl_node_health_state gauge",
            *(
                f'fmctl_node_health_state{{state="{s}"}} {int(s == current)}'
                for s in ("healthy", "faulty", "unchecked")
            ),
            "# HELP fmctl_node_faults_total Faults the health agent saw on the node, by code "
            "and class.",
            "# TYPE fmctl_node_faults_total counter",
            *(
                f'fmctl_node_faults_total{{code="{c}",class="{k}"}} {n}'
                for (c, k), n in sorted(seen.items())
            ),
        ]
        self.metrics.mkdir(parents=True, exist_ok=True)
        part = self.metrics / "fmctl-health.prom.tmp"
        part.write_text("\n".join(lines) + "\n")
        part.replace(self.metrics / "fmctl-health.prom")


def main(argv: list[str] | None = None) -> int:
    """Run passes every ``--interval`` seconds (one with ``--once``)."""
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--node", default=os.environ.get("NODE_NAME", ""))
    args.add_argument("--scripts", type=Path, default=Path("/opt/fmctl/lib"))
    args.add_argument("--state", type=Path, default=Path("/var/lib/fmctl/health"))
    args.add_argument("--kmsg", type=Path, default=Path("/dev/kmsg"))
    args.add_argument("--boot-id", type=Path, default=Path("/proc/sys/kernel/random/boot_id"))
    args.add_argument(
        "--metrics", type=Path, help="node_exporter's textfile folder for its series (none: off)"
    )
    args.add_argument("--interval", type=float, default=30.0)
    args.add_argument("--once", action="store_true")
    args.add_argument("--alive", type=Path, help="touched after every pass (liveness)")
    args.add_argument("--server", help="the API's URL (in a pod: the kubernetes Service's)")
    args.add_argument(
        "--account", type=Path, default=Path(ACCOUNT), help="token and ca.crt (in a pod: its own)"
    )
    opts = args.parse_args(argv)
    server = server_url(opts.server)
    if not server or not opts.node:
        print("error: no API server or no node name (--server, --node)", file=sys.stderr)
        return 1
    opts.state.mkdir(parents=True, exist_ok=True)
    agent = Agent(
        Api(server, opts.account),
        opts.node,
        opts.scripts,
        opts.state,
        opts.kmsg,
        opts.boot_id,
        opts.metrics,
    )
    return run_passes(
        agent.run_pass,
        agent.say,
        opts.interval,
        opts.once,
        opts.alive,
        (subprocess.TimeoutExpired, json.JSONDecodeError),
    )


if __name__ == "__main__":
    sys.exit(main())
