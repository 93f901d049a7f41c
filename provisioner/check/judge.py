"""Verdicts: what each node's tools said against what the catalog says the node has, and a
pool's NCCL all-reduce bandwidth against what its EFA network can carry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from provisioner.catalog.nccl_baselines import (
    BASELINE_FRACTION,
    NCCL_FLOOR,
    NcclBaseline,
    nearest,
    published,
)
from provisioner.check.outputs import (
    LOST,
    DiagReport,
    EfaReport,
    ExporterState,
    GpuReport,
    HealthState,
    ImexState,
    NcclReport,
)
from provisioner.render.pools import PoolContext as Pool

#: The largest message must be at least this big for the figure to mean something (small
#: messages measure latency, not bandwidth).
MIN_JUDGED_BYTES = 2**30


@dataclass(frozen=True)
class Finding:
    """One check on one node or pool: passed (True), failed (False) or shown only (None)."""

    check: str
    ok: bool | None
    figure: str
    expected: str = ""
    detail: str = ""


@dataclass
class Verdict:
    """A node's (or a pool's NCCL run's) findings."""

    subject: str
    pool: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(f.ok is not False for f in self.findings)

    def failed(self) -> list[Finding]:
        return [f for f in self.findings if f.ok is False]


def judge_node(
    node: str,
    pool: Pool,
    smi: GpuReport | None,
    diag: DiagReport | None,
    efa: EfaReport | None,
    exporters: list[ExporterState] | None = None,
    imex: ImexState | None = None,
    nvlink_on_node: bool = True,
    health: HealthState | None = None,
) -> Verdict:
    """GPUs (count, model, lost GPUs, uncorrectable ECC), DCGM's level-2 diagnostic, the
    EFA devices and, on UltraServer nodes, whether IMEX formed the NVLink domain, for one
    node of ``pool``; optional exporters its bootstrap could not install are shown (they
    never fail a node: its jobs run without them). ``nvlink_on_node`` False (EKS): no IMEX
    daemon runs on the node by itself there (the DRA driver starts one per ComputeDomain),
    so the NVLink domain is judged per job instead (``judge_domain``). ``health``: what the
    node's health agent recorded; a node it drained fails (it leaves the scheduler), a fault
    it held is shown."""
    verdict = Verdict(node, pool.name)
    verdict.findings.append(_gpus(pool, smi))
    verdict.findings.append(_dcgm(diag))
    if pool.efa:
        verdict.findings.append(_efa(pool, efa))
    if pool.itype.ultra_server and nvlink_on_node:
        verdict.findings.append(_nvlink(imex))
    missing = [e for e in exporters or [] if not e.ok]
    if missing:
        names = ", ".join(e.name for e in missing)
        reasons = "; ".join(f"{e.name}: {e.reason}" for e in missing)
        verdict.findings.append(Finding("exporters", None, f"missing {names}", "", reasons))
    if health is not None:
        verdict.findings.append(_health(health))
    return verdict


def _health(health: HealthState) -> Finding:
    if health.state == "draining":
        return Finding("health", False, "drained by the health agent", "healthy", health.detail)
    if health.state == "held":
        return Finding("health", None, "a fault held", "healthy", health.detail)
    return Finding("health", True, "healthy", "healthy")


def _gpus(pool: Pool, smi: GpuReport | None) -> Finding:
    want = f"{pool.gpus} x {pool.itype.gpu.model if pool.itype.gpu else '-'}"
    if smi is None:
        return Finding("gpus", False, "no nvidia-smi output", want, "the node did not report")
    lost = [e for e in smi.errors if LOST.search(e)]
    if lost:
        return Finding("gpus", False, f"{len(smi.gpus)} GPUs", want, f"GPU lost: {lost[0]}")
    if len(smi.gpus) != pool.gpus:
        detail = smi.errors[0] if smi.errors else "a GPU is missing from the PCI bus or driver"
        return Finding("gpus", False, f"{len(smi.gpus)} GPUs", want, detail)
    model = pool.itype.gpu.model if pool.itype.gpu else ""
    strangers = sorted({g.name for g in smi.gpus if model.lower() not in g.name.lower()})
    if strangers:
        return Finding("gpus", False, ", ".join(strangers), want, "not the catalog's GPU model")
    ecc = [g for g in smi.gpus if g.ecc_uncorrected]
    if ecc:
        where = ", ".join(f"GPU {g.index}: {g.ecc_uncorrected}" for g in ecc)
        return Finding("gpus", False, f"{len(smi.gpus)} GPUs", want, f"uncorrectable ECC ({where})")
    return Finding("gpus", True, f"{len(smi.gpus)} GPUs", want)


def _dcgm(diag: DiagReport | None) -> Finding:
    if diag is None:
        return Finding("dcgm", False, "no diagnostic output", "all tests pass")
    if diag.error:
        return Finding("dcgm", False, "did not run", "all tests pass", diag.error)
    failed = diag.failed()
    if failed:
        first = failed[0]
        where = f"GPU {first.gpu}" if first.gpu is not None else "node"
        detail = f"{first.test} failed on {where}" + (f": {first.message}" if first.message else "")
        return Finding("dcgm", False, f"{len(failed)} failed", "all tests pass", detail)
    warned = diag.warned()
    figure = f"{len(diag.results)} results pass" + (f", {len(warned)} warn" if warned else "")
    detail = f"{warned[0].test}: {warned[0].message}" if warned else ""
    return Finding("dcgm", True, figure, "all tests pass", detail)


def _efa(pool: Pool, efa: EfaReport | None) -> Finding:
    want = f"{pool.efa_devices} EFA devices"
    if efa is None:
        return Finding("efa", False, "no EFA device list", want, "the node did not report")
    found = len(efa.domains)
    if found != pool.efa_devices:
        detail = efa.error or "an EFA device is missing (NCCL would fall back or fail)"
        return Finding("efa", False, f"{found} EFA devices", want, detail)
    return Finding("efa", True, f"{found} EFA devices", want)


def _nvlink(imex: ImexState | None) -> Finding:
    want = "IMEX domain UP: every node READY and connected (the multi-node NVLink domain)"
    if imex is None:
        return Finding("nvlink", False, "no IMEX state", want, "the node did not report")
    if imex.ready:
        return Finding("nvlink", True, f"IMEX {imex.said}", want)
    return Finding(
        "nvlink",
        False,
        "NVLink domain not formed",
        want,
        f"nvidia-imex-ctl: {imex.said}; GPUs on other instances are reached over EFA "
        "only (fmctl configures IMEX on Slurm, not yet on EKS)",
    )


def judge_domain(pool: Pool, domain: dict[str, Any], nodes: list[str]) -> Verdict:
    """The NVLink domain of an EKS job on ``nodes`` from its ComputeDomain's status: every
    node of the job listed and Ready, all in one clique (one NVLink domain). Not the
    domain's own word alone: with ``numNodes: 0`` an empty domain is Ready too (the DRA
    driver's ``calculateGlobalStatus``)."""
    verdict = Verdict(f"nvlink domain ({pool.name})", pool.name)
    want = f"ComputeDomain Ready on all {len(nodes)} nodes, one clique"
    listed = {n.get("name"): n for n in domain.get("nodes") or []}
    missing = sorted(set(nodes) - set(listed))
    not_ready = sorted(n for n in nodes if n in listed and listed[n].get("status") != "Ready")
    cliques = {str(listed[n].get("cliqueID", "")) for n in nodes if n in listed}
    ready = len(nodes) - len(missing) - len(not_ready)
    figure = f"{domain.get('status', 'no status')}, {ready}/{len(nodes)} nodes ready"
    if not domain:
        verdict.findings.append(
            Finding(
                "nvlink",
                False,
                "no ComputeDomain status",
                want,
                "the job's domain was not found: is NVIDIA's DRA driver running?",
            )
        )
    elif missing or not_ready:
        where = ", ".join(missing + not_ready)
        verdict.findings.append(
            Finding(
                "nvlink",
                False,
                figure,
                want,
                f"no ready IMEX daemon on {where}: their GPUs reach the others over EFA only",
            )
        )
    elif len(cliques) != 1 or "" in cliques:
        verdict.findings.append(
            Finding(
                "nvlink",
                False,
                figure,
                want,
                f"cliques {', '.join(sorted(cliques))}: the nodes are not in one NVLink domain",
            )
        )
    else:
        verdict.findings.append(Finding("nvlink", True, f"{figure}, clique {cliques.pop()}", want))
    return verdict


def expected_busbw_gbs(pool: Pool) -> float:
    """The bus bandwidth a multi-node all-reduce can reach on ``pool``: each node's EFA
    bandwidth (the catalog's network Gbps) in GB/s."""
    return pool.itype.network.bandwidth_gbps / 8


def judge_nccl(pool: Pool, report: NcclReport, saved: tuple[NcclBaseline, ...] = ()) -> Verdict:
    """The pool's all_reduce_perf run: no wrong results, and the largest message's bus
    bandwidth against the baseline for the pool's type and node count measured nearest that
    size (the user's saved one first, then the published ones): at least
    ``BASELINE_FRACTION`` of it. Without one, against ``NCCL_FLOOR`` of EFA's line rate."""
    verdict = Verdict(f"nccl all-reduce ({pool.name})", pool.name)
    largest = report.largest
    if largest is None:
        detail = report.errors[0] if report.errors else "no result table in the output"
        verdict.findings.append(Finding("nccl", False, "no result", "a result table", detail))
        return verdict
    wrong = sum(r.wrong for r in report.rows)
    if wrong:
        verdict.findings.append(
            Finding("nccl", False, f"{wrong} wrong values", "0", "data corruption: a GPU or link")
        )
    figure = f"{largest.busbw_gbs:.1f} GB/s at {_size(largest.size_bytes)}"
    nodes = len(report.hosts)
    if nodes < 2:
        verdict.findings.append(
            Finding("nccl", None, figure, "", "one node: NVLink only, EFA not exercised")
        )
        return verdict
    detail = f"{nodes} nodes, {report.ranks} ranks"
    if largest.size_bytes < MIN_JUDGED_BYTES:
        verdict.findings.append(
            Finding(
                "nccl",
                False,
                figure,
                f"messages up to at least {_size(MIN_JUDGED_BYTES)}",
                detail + "; small messages measure latency: run all_reduce_perf with -e 16G",
            )
        )
        return verdict
    mine = [b for b in saved if b.pool == pool.name and b.nodes == nodes]
    row = nearest(mine or published(pool.instance_type, nodes), largest.size_bytes)
    if row is not None:
        floor = BASELINE_FRACTION * row.busbw_gbs
        at = f" at {_size(row.size_bytes)}" if row.size_bytes else ""
        want = (
            f">= {floor:.0f} GB/s ({BASELINE_FRACTION:.0%} of {row.busbw_gbs:.0f}{at} on "
            f"{row.nodes} x {row.instance_type}: {row.source})"
        )
    else:
        floor = NCCL_FLOOR * expected_busbw_gbs(pool)
        want = (
            f">= {floor:.0f} GB/s ({NCCL_FLOOR:.0%} of EFA's {expected_busbw_gbs(pool):.0f}: "
            "a line-rate estimate, not a measurement)"
        )
        detail += (
            f"; no measured baseline for {nodes} x {pool.instance_type} is published: the "
            "floor is a line-rate estimate; `fmctl check --save-baseline` records this pool's "
            "from a healthy run"
        )
    passed = largest.busbw_gbs >= floor
    if not passed:
        detail += "; NCCL may not be on EFA, or a link is slow (NCCL_DEBUG=INFO says which)"
    verdict.findings.append(Finding("nccl", passed, figure, want, detail))
    return verdict


def _size(size_bytes: int) -> str:
    return f"{size_bytes / 2**30:g} GiB"
