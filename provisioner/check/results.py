"""A results folder gathered on the nodes, and the whole check's report.

Layout (what slurm/lib/node-check.sh writes for its node, and an all_reduce_perf log per
pool)::

    DIR/nodes/NODE/pool              the pool (Slurm queue, EKS node group) the node is in
    DIR/nodes/NODE/nvidia-smi.csv    nvidia-smi --query-gpu=... --format=csv,noheader,nounits
    DIR/nodes/NODE/dcgmi-diag.json   dcgmi diag -r 2 -j
    DIR/nodes/NODE/fi_info.txt       fi_info -p efa -t FI_EP_RDM
    DIR/nodes/NODE/efa-devices.txt   its EFA RDM domains, as slurm/lib/efa-devices.sh counts
    DIR/nodes/NODE/exporters.txt     optional exporters the bootstrap installed or not
    DIR/nodes/NODE/health.txt        the health agent's state (Slurm nodes)
    DIR/nccl/POOL.txt                all_reduce_perf's output across the pool's nodes

A live check reads the same files from one stream (a pod's log, or what
slurm/lib/cluster-check.sh printed on the head node), each after a frame line:
``==> fmctl-check NODE FILE <==``, ``==> fmctl-check-nccl POOL <==``, and
``==> fmctl-check-skipped NODE POOL <==`` followed by the reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.catalog.nccl_baselines import NcclBaseline
from provisioner.check import outputs
from provisioner.check.judge import Finding, Verdict, judge_domain, judge_nccl, judge_node
from provisioner.render.context import ClusterContext


@dataclass
class CheckReport:
    """Every node's and pool's verdict, and which nodes did not report."""

    verdicts: list[Verdict] = field(default_factory=list)
    #: pool -> (nodes that reported, nodes the spec has)
    coverage: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: (node, pool, why) of the nodes a live check left out (busy, cordoned, not Ready)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.verdicts)

    def as_data(self) -> dict[str, Any]:
        """The report for --json (CI reads ``ok`` and each failed node)."""
        return {
            "ok": self.ok,
            "pools": {p: {"reported": r, "nodes": n} for p, (r, n) in self.coverage.items()},
            "skipped": [{"node": n, "pool": p, "why": w} for n, p, w in self.skipped],
            "verdicts": [
                {
                    "subject": v.subject,
                    "pool": v.pool,
                    "ok": v.ok,
                    "findings": [f.__dict__ for f in v.findings],
                }
                for v in self.verdicts
            ],
        }


_FRAME = re.compile(r"^==> (fmctl-check(?:-nccl|-skipped)?) (\S+)(?: (\S+))? <==$")
#: A node, pool or file name that can only name a place inside the results folder.
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def split_stream(text: str, folder: Path) -> list[tuple[str, str, str]]:
    """Write a framed stream into ``folder``'s layout; return the (node, pool, why) of the
    nodes it says were skipped. Lines before the first frame are dropped, and so is a
    section whose frame names anything but plain names (the stream comes from the cluster:
    it never writes outside ``folder``). A file framed again starts over: on EKS both of a
    node's check containers say which pool it is in."""
    skipped: list[tuple[str, str, str]] = []
    parts: dict[Path, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines(keepends=True):
        match = _FRAME.match(line.rstrip("\n"))
        if match and not all(_SAFE.match(x) for x in match.groups() if x):
            current = None  # what follows an unsafe frame is dropped
            continue
        if match:
            kind, first, second = match.groups()
            if kind == "fmctl-check" and second:
                current = parts[folder / "nodes" / first / second] = []
            elif kind == "fmctl-check-nccl":
                current = parts[folder / "nccl" / f"{first}.txt"] = []
            elif kind == "fmctl-check-skipped" and second:
                skipped.append((first, second, ""))
                current = None
            continue
        if current is not None:
            current.append(line)
        elif skipped and not skipped[-1][2]:
            node, pool, _ = skipped[-1]
            skipped[-1] = (node, pool, line.strip())
    for path, lines in parts.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(lines))
    return skipped


def _read(path: Path) -> str | None:
    return path.read_text(errors="replace") if path.is_file() else None


def check_folder(
    context: ClusterContext, folder: Path, saved: tuple[NcclBaseline, ...] = ()
) -> CheckReport:
    """Judge every node and NCCL log under ``folder`` against the spec's pools (NCCL against
    the user's ``saved`` baselines where there are some)."""
    pools = {p.name: p for p in context.pools}
    report = CheckReport()
    reported = dict.fromkeys(pools, 0)
    nodes = sorted(p for p in (folder / "nodes").glob("*") if p.is_dir())
    for node in nodes:
        pool_name = (_read(node / "pool") or "").strip()
        pool = pools.get(pool_name)
        if pool is None:
            verdict = Verdict(node.name, pool_name or "?")
            known = ", ".join(pools)
            verdict.findings.append(
                Finding("pool", False, pool_name or "none", known, "not a pool of this spec")
            )
            report.verdicts.append(verdict)
            continue
        reported[pool.name] += 1
        smi, diag, fi_info, devices, exporters, imex, health = (
            _read(node / "nvidia-smi.csv"),
            _read(node / "dcgmi-diag.json"),
            _read(node / "fi_info.txt"),
            _read(node / "efa-devices.txt"),
            _read(node / "exporters.txt"),
            _read(node / "imex.txt"),
            _read(node / "health.txt"),
        )
        report.verdicts.append(
            judge_node(
                node.name,
                pool,
                outputs.parse_nvidia_smi(smi) if smi is not None else None,
                outputs.parse_dcgm_diag(diag) if diag is not None else None,
                outputs.efa_report(devices, fi_info) if devices is not None else None,
                outputs.parse_exporters(exporters or ""),
                outputs.parse_imex(imex) if imex is not None else None,
                nvlink_on_node=context.scheduler != "kubernetes",
                health=outputs.parse_health(health) if health is not None else None,
            )
        )
    for name, pool in pools.items():
        log = _read(folder / "nccl" / f"{name}.txt")
        if log is not None:
            report.verdicts.append(judge_nccl(pool, outputs.parse_nccl(log), saved))
        domain = _read(folder / "nccl" / f"{name}.domain.json")
        if domain is not None:  # EKS with DRA: the job's ComputeDomain, as gathered
            said = json.loads(domain)
            report.verdicts.append(judge_domain(pool, said.get("status") or {}, said["nodes"]))
        report.coverage[name] = (reported[name], pool.count)
    return report


def passed_nodes(context: ClusterContext, folder: Path) -> dict[str, list[str]]:
    """Pool -> the nodes under ``folder`` whose own checks all passed: those the NCCL run
    goes across (a broken node would only make the pool's figure fail for its sake)."""
    pools = {p.name for p in context.pools}
    passed: dict[str, list[str]] = {}
    for verdict in check_folder(context, folder).verdicts:
        if verdict.ok and verdict.pool in pools and verdict.findings[0].check != "nccl":
            passed.setdefault(verdict.pool, []).append(verdict.subject)
    return passed


def measured_baselines(context: ClusterContext, folder: Path, when: str) -> list[NcclBaseline]:
    """Each pool's multi-node NCCL figure under ``folder`` (its largest message), as the
    pool's own baseline: what `fmctl check --save-baseline` keeps from a healthy run."""
    rows = []
    for pool in context.pools:
        log = _read(folder / "nccl" / f"{pool.name}.txt")
        report = outputs.parse_nccl(log) if log is not None else None
        if report is None or report.largest is None or len(report.hosts) < 2:
            continue
        rows.append(
            NcclBaseline(
                pool.instance_type,
                len(report.hosts),
                report.largest.size_bytes,
                report.largest.busbw_gbs,
                f"saved by fmctl check --save-baseline on {when}",
                pool=pool.name,
            )
        )
    return rows
