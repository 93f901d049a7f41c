"""What the node tools print, as data: nvidia-smi's CSV query, `dcgmi diag -j`, the EFA
devices (`fi_info -p efa -t FI_EP_RDM` as counted on the node), the optional exporters and
nccl-tests' `all_reduce_perf` table. Parsers never raise on odd input:
a tool that printed an error instead of its report is itself a finding."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

#: The columns node-check.sh asks nvidia-smi for, in order.
NVIDIA_SMI_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "memory.total",
    "ecc.errors.uncorrected.volatile.total",
)
#: What nvidia-smi prints when a GPU has fallen off the bus or the driver lost it.
LOST = re.compile(r"Unable to determine the device handle|GPU is lost", re.IGNORECASE)


@dataclass(frozen=True)
class Gpu:
    """One line of nvidia-smi's query."""

    index: int
    name: str
    uuid: str
    bus_id: str
    memory_mib: int | None
    #: Uncorrectable ECC errors since the driver loaded; None when not reported ([N/A]).
    ecc_uncorrected: int | None


@dataclass
class GpuReport:
    """nvidia-smi's answer: the GPUs it lists and the errors it printed."""

    gpus: list[Gpu] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _int(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


def parse_nvidia_smi(text: str) -> GpuReport:
    """``nvidia-smi --query-gpu=<NVIDIA_SMI_FIELDS> --format=csv,noheader,nounits``."""
    report = GpuReport()
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == len(NVIDIA_SMI_FIELDS) and parts[0].isdigit():
            report.gpus.append(
                Gpu(
                    index=int(parts[0]),
                    name=parts[1],
                    uuid=parts[2],
                    bus_id=parts[3],
                    memory_mib=_int(parts[4]),
                    ecc_uncorrected=_int(parts[5]),
                )
            )
        else:  # an error line instead of a GPU (a lost GPU, a driver that is not loaded)
            report.errors.append(line.strip())
    return report


@dataclass(frozen=True)
class DiagResult:
    """One test's result on one GPU (``gpu`` None when the test is not per GPU)."""

    test: str
    gpu: int | None
    status: str
    message: str = ""


@dataclass
class DiagReport:
    """`dcgmi diag -r 2 -j`: every result, or why there is none."""

    results: list[DiagResult] = field(default_factory=list)
    error: str | None = None

    def failed(self) -> list[DiagResult]:
        return [r for r in self.results if r.status.lower() == "fail"]

    def warned(self) -> list[DiagResult]:
        return [r for r in self.results if r.status.lower() == "warn"]


def _messages(result: dict[str, Any]) -> str:
    found = []
    for key in ("warnings", "errors"):
        for item in result.get(key) or []:
            text = item.get("warning") or item.get("error") if isinstance(item, dict) else item
            if text:
                found.append(str(text))
    info = result.get("info")
    if isinstance(info, list):
        found += [str(i) for i in info]
    elif info:
        found.append(str(info))
    return "; ".join(found)


def _gpu_of(result: dict[str, Any]) -> int | None:
    for key in ("gpu_id", "gpu_ids", "entity_id"):
        value = result.get(key)
        if isinstance(value, int):
            return value
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
    return None


def parse_dcgm_diag(text: str) -> DiagReport:
    """`dcgmi diag -r 2 -j`. DCGM 3 nests results under "DCGM GPU Diagnostic", DCGM 4 under
    "DCGM Diagnostic"; both as test_categories -> tests -> results with a status."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return DiagReport(error=text.strip() or "no output")
    try:
        data = json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        return DiagReport(error=f"unreadable JSON: {exc}")
    body = next((v for v in data.values() if isinstance(v, dict) and "test_categories" in v), None)
    if body is None:
        return DiagReport(error="no test_categories in the diagnostic's JSON")
    report = DiagReport()
    for category in body["test_categories"]:
        for test in category.get("tests", []):
            for result in test.get("results", []):
                report.results.append(
                    DiagResult(
                        test=str(test.get("name", "?")),
                        gpu=_gpu_of(result),
                        status=str(result.get("status", "?")),
                        message=_messages(result),
                    )
                )
    return report


@dataclass
class EfaReport:
    """A node's EFA devices: the RDM domains its own efa-devices.sh counted, one per device."""

    domains: list[str] = field(default_factory=list)
    error: str | None = None


def efa_report(devices: str, fi_info: str | None) -> EfaReport:
    """The node's efa-devices.txt (one domain per line, written on the node by
    slurm/lib/efa-devices.sh — the prolog's counting rule, so fmctl and the prolog never
    disagree) with fi_info's own text for the reason when it found none."""
    domains = [line.strip() for line in devices.splitlines() if line.strip()]
    if domains:
        return EfaReport(domains=domains)
    text = (fi_info or "").strip()
    return EfaReport(error=text.splitlines()[-1] if text else "no output")


@dataclass(frozen=True)
class ExporterState:
    """One optional exporter the node's bootstrap installed (``ok``) or could not."""

    name: str
    ok: bool
    reason: str = ""


def parse_exporters(text: str) -> list[ExporterState]:
    """node-check.sh's exporters.txt: ``NAME ok`` or ``NAME missing: why`` per line."""
    states = []
    for line in text.splitlines():
        name, _, state = line.strip().partition(" ")
        if not name:
            continue
        ok = state.strip() == "ok"
        reason = state.split(":", 1)[1].strip() if ":" in state else state.strip()
        states.append(ExporterState(name, ok, "" if ok else reason))
    return states


@dataclass(frozen=True)
class HealthState:
    """What fmctl's health agent last recorded on the node (slurm/lib/health-agent.sh's
    state file): ``healthy``, ``draining`` (it drained the node for a node-level fault) or
    ``held`` (a node-level fault it did not act on: the repair budget, or someone else's
    drain), with its words."""

    state: str
    detail: str


HEALTH_STATES = ("healthy", "draining", "held")


def parse_health(text: str) -> HealthState | None:
    """node-check.sh's health.txt: the agent's state line, or None where no agent recorded
    one (an EKS node, a node whose agent has not run yet)."""
    state, _, detail = text.strip().partition(" ")
    return HealthState(state, detail.strip()) if state in HEALTH_STATES else None


@dataclass(frozen=True)
class ImexState:
    """What a node said of IMEX (node-check.sh's imex.txt): ``nvidia-imex-ctl -q``'s word
    (READY once this node's daemon is up: NVIDIA's IMEX guide), then ``-N -j``'s domain
    (its "status", UP when formed, and each peer's: "not the entire domain" is all ``-q``
    proves, NVIDIA's DRA driver says). ``ready`` is the domain formed: UP, every peer READY
    and connected."""

    ready: bool
    said: str
    #: The domain's status (UP, DOWN, DEGRADED), None when the node gave none.
    domain: str | None = None
    #: Peers not READY or not connected, by address.
    lagging: tuple[str, ...] = ()


IMEX_DOMAIN_MARK = "-- nvidia-imex-ctl -N -j"


def parse_imex(text: str) -> ImexState:
    """node-check.sh's imex.txt."""
    local, _, rest = text.partition(IMEX_DOMAIN_MARK)
    lines = [line.strip() for line in local.splitlines() if line.strip()]
    first = lines[0] if lines else "no output"
    if first != "READY":
        return ImexState(False, first)
    try:
        found = json.loads(rest)
    except ValueError:
        return ImexState(False, "READY here, but no domain status (nvidia-imex-ctl -N -j)")
    nodes = found.get("nodes") or {} if isinstance(found, dict) else {}
    lagging = tuple(
        sorted(
            {
                f"{n.get('host', '?')} {n.get('status', '?')}"
                for n in nodes.values()
                if n.get("status") != "READY"
            }
            | {
                f"{n.get('host', '?')}-{c.get('host', '?')} {c.get('status', '?')}"
                for n in nodes.values()
                for c in (n.get("connections") or {}).values()
                if c.get("status") != "CONNECTED"
            }
        )
    )
    domain = str(found.get("status", "?")) if isinstance(found, dict) else "?"
    formed = domain == "UP" and not lagging and bool(nodes)
    said = f"domain {domain}, {len(nodes)} nodes" + (
        "; " + ", ".join(lagging[:4]) if lagging else ""
    )
    return ImexState(formed, said, domain, lagging)


@dataclass(frozen=True)
class NcclRow:
    """One message size of all_reduce_perf (out-of-place figures)."""

    size_bytes: int
    algbw_gbs: float
    busbw_gbs: float
    wrong: int


@dataclass
class NcclReport:
    """An all_reduce_perf run: the ranks, the hosts they ran on, the table."""

    ranks: int = 0
    hosts: list[str] = field(default_factory=list)
    rows: list[NcclRow] = field(default_factory=list)
    avg_busbw_gbs: float | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def largest(self) -> NcclRow | None:
        """The row of the largest message: the bandwidth the collective sustains."""
        return max(self.rows, key=lambda r: r.size_bytes) if self.rows else None


_RANK = re.compile(r"#\s+Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([0-9.]+)")
#: The Kubernetes job's all-reduce (templates/kubernetes/nccl-test): its header and rows.
_TORCH_HEAD = re.compile(r"^# nccl-allreduce ranks=(\d+) nodes=(\S+)")
_TORCH_ROW = re.compile(r"^size=(\d+) time_us=([0-9.]+) busbw_GBps=([0-9.]+)")


def parse_nccl(text: str) -> NcclReport:
    """nccl-tests' table: size count type redop root time algbw busbw #wrong (out of place),
    then the same in place; or the Kubernetes job's ``size= time_us= busbw_GBps=`` rows."""
    report = NcclReport()
    for line in text.splitlines():
        if match := _TORCH_HEAD.match(line.strip()):
            report.ranks = int(match.group(1))
            report.hosts = match.group(2).split(",")
            continue
        if match := _TORCH_ROW.match(line.strip()):
            size, busbw = int(match.group(1)), float(match.group(3))
            world = max(report.ranks, 2)
            # algbw = busbw / (2(n-1)/n): the job prints only the bus figure.
            report.rows.append(NcclRow(size, busbw * world / (2 * (world - 1)), busbw, 0))
            continue
        if match := _RANK.search(line):
            report.ranks += 1
            if match.group(1) not in report.hosts:
                report.hosts.append(match.group(1))
            continue
        if match := _AVG.search(line):
            report.avg_busbw_gbs = float(match.group(1))
            continue
        parts = line.split()
        if len(parts) >= 9 and parts[0].isdigit() and parts[1].isdigit():
            try:
                report.rows.append(
                    NcclRow(int(parts[0]), float(parts[6]), float(parts[7]), _wrong(parts[8]))
                )
            except ValueError:
                report.errors.append(line.strip())
        elif re.search(r"\b(error|failed|abort)\b", line, re.IGNORECASE) and not line.startswith(
            "#"
        ):
            report.errors.append(line.strip())
    return report


def _wrong(text: str) -> int:
    """The #wrong column: a count, or N/A when the run did not check (-c 0)."""
    return int(text) if text.isdigit() else 0
