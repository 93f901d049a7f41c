"""The fault table fmctl's node health agent decides by: fault code -> class -> action.

XIDs (the NVIDIA driver's ``NVRM: Xid (PCI:...): N, ...`` kernel lines) take their class from
NVIDIA's Xid catalog for Ampere and newer GPUs ("Analyzing Xid Errors with the Xid Catalog",
docs.nvidia.com/deploy/xid-errors: each Xid's *Resolution Bucket (Immediate Action)*), read
as NVIDIA's own NVSentinel ships it (distros/kubernetes/nvsentinel/charts/gpu-health-monitor/
xiderrorsmapping.csv at 6f8b0fcf: code, mnemonic, bucket, FATAL/NONFATAL; XIDs 1-162).
The buckets are grouped here by what fmctl does about them:

- the job's to handle (RESTART_APP, IGNORE, WORKFLOW_XID_45, CHECK_UVM and Xid 154, which
  only points at another Xid): never drains a node, only counted;
- the GPU needs a reset (RESET_GPU) or the machine a restart (RESTART_BM, RESTART_VM):
  ``reboot``, which on EC2 cannot reset one GPU under a running node;
- the rest (UNEXPECTED_ERR_REPORT_ISSUE, the DBE, NVLink and NVLink5 workflows,
  CHECK_MECHANICALS, UPDATE_SWFW): the hardware is suspect, ``replace``.

fmctl's own rows come from what the node must show (the catalog's GPU and EFA counts, as the
prolog checks them): a GPU or EFA device gone is ``replace``; so is an NVLink down (a GPU
with fewer links reporting a speed than the node's best GPU, or than the node had), and the
FSx file system or the instance-store array not mounted or not answering. A GPU's row
remapper (Ampere and newer: a bad HBM row swapped for a spare one at the next GPU reset)
that failed is ``replace`` (NVIDIA's RMA criterion); one still pending is ``reboot``, its
jobs left to finish (NVIDIA: unaffected work runs on until a convenient reset, which the
reboot is, and the XID that announces it, 63, is in its IGNORE bucket). EFA
error counters that rise are counted, never acted on (AWS's own node monitoring agent only
warns of them). DCGM's health watches: a Failure is ``replace``, a Warning counted.

Each row also says what becomes of the jobs running on the node: they finish, except where
the work is lost already (RESET_GPU, RESTART_BM, RESTART_VM, a GPU gone), where they are
requeued at once; and how the agents count it: an XID (a kernel line, read once) and an EFA
counter's rise (since the last look) are *events*, new each time they are found and counted
each time; every other row is a *state* that lasts (GPUs missing, a link down), counted once
when it appears, not at every look while it lasts.

``python -m provisioner.catalog.faults`` prints the table as the node agent reads it
(slurm/lib/faults.tsv, kept equal to this module by a test).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import Enum

XID_SOURCE = (
    "NVIDIA Xid catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), "
    "as NVIDIA/NVSentinel gpu-health-monitor/xiderrorsmapping.csv at 6f8b0fcf"
)
FMCTL_SOURCE = "fmctl: the catalog's per-node GPU and EFA counts (the prolog's checks)"
DCGM_HEALTH_SOURCE = (
    "DCGM's health watches, `dcgmi health -c -j` (NVIDIA/DCGM dcgmi/Health.cpp at 72fa3fe: "
    "Healthy, Warning or Failure)"
)
NVLINK_SOURCE = (
    "`nvidia-smi nvlink -s` (its form: a recorded p4de answer, aws-samples/awsome-distributed-"
    "training 1.architectures/efa-cheatsheet.md at 7217859f): a GPU with fewer links up than "
    "the node's best GPU, or than the node had"
)
STORAGE_SOURCE = (
    "fmctl: the spec's storage (storage.fsxLustre.mountPath, storage.localNvme.mountPath), "
    "mounted on every node before OnNodeConfigured runs: not a mount point, or no answer in "
    "10 s (a hung Lustre client blocks)"
)
ROW_REMAP_SOURCE = (
    "`nvidia-smi -q -d ROW_REMAPPER`'s Remapped Rows (its form: a recorded 8 x H100 answer, "
    "tests/data/real/README.md); NVIDIA's GPU Memory Error Management, Error Recovery and "
    "Response Flags (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt): the pending flag's "
    "remap happens at the next GPU reset, the failure flag is the RMA policy's"
)
EFA_COUNTER_SOURCE = (
    "the EFA driver's hw_counters that AWS's node monitoring agent watches, and warns of "
    "only (aws/eks-node-monitoring-agent monitors/networking/efa/efa.go at 51af549)"
)


class Action(Enum):
    """What the agent does about a fault on a node."""

    NONE = "none"  # counted and reported; the node keeps working
    REBOOT = "reboot"
    REPLACE = "replace"


class Seen(Enum):
    """How the agents count a fault they find: anew each time, or once while it lasts."""

    EVENT = "event"  # a kernel line or a counter's rise: each find is a new fault
    STATE = "state"  # a condition of the node: counted when it appears


class Jobs(Enum):
    """What becomes of the jobs running on a node the agent takes out of service."""

    FINISH = "finish"  # they run to their end; the repair waits for them
    REQUEUE = "requeue"  # they are lost already: requeued now, so they restart elsewhere


@dataclass(frozen=True)
class FaultRow:
    """One row: a fault code (``xid:79``, ``gpu-count``), its class (NVIDIA's resolution
    bucket, or fmctl's), what the agent does, what becomes of the node's running jobs, how
    the agents count it and where the row comes from."""

    code: str
    fault_class: str
    action: Action
    source: str
    jobs: Jobs = Jobs.FINISH
    seen: Seen = Seen.STATE


def _spans(text: str) -> tuple[int, ...]:
    """XIDs written as "8 11 39-41": single codes and inclusive ranges."""
    out: list[int] = []
    for part in text.split():
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return tuple(out)


#: NVIDIA's immediate-action bucket -> the XIDs it holds (1-162).
XID_BUCKETS: dict[str, tuple[int, ...]] = {
    "RESTART_APP": _spans(
        "8 11 13 25 31 32 39-41 60 68-72 75-77 80 82-86 88 89 94 96-105 126-135 139"
    ),
    "IGNORE": _spans("14 37 38 43 44 63 66 67 92 93 106 107 121 137 141 152 153 157 161"),
    "WORKFLOW_XID_45": _spans("45"),
    "CHECK_UVM": _spans("159"),
    "FOLLOW_OTHER_XID": _spans("154"),
    "RESET_GPU": _spans("46 62 64 95 109 110 119 120 136 140 143 155 156 158 162"),
    "RESTART_BM": _spans("79 160"),
    "RESTART_VM": _spans("151"),
    "WORKFLOW_XID_48": _spans("48"),
    "WORKFLOW_NVLINK_ERR": _spans("74"),
    "WORKFLOW_NVLINK5_ERR": _spans("144-150"),
    "CHECK_MECHANICALS": _spans("54"),
    "UPDATE_SWFW": _spans("78"),
    "UNEXPECTED_ERR_REPORT_ISSUE": _spans(
        "1-7 9 10 12 15-24 26-30 33-36 42 47 49-53 55-59 61 65 73 81 87 90 91 108 111-118 "
        "122-125 138 142"
    ),
}

#: What fmctl does about each bucket (see the module's docstring).
BUCKET_ACTION: dict[str, Action] = {
    "RESTART_APP": Action.NONE,
    "IGNORE": Action.NONE,
    "WORKFLOW_XID_45": Action.NONE,
    "CHECK_UVM": Action.NONE,
    "FOLLOW_OTHER_XID": Action.NONE,
    "RESET_GPU": Action.REBOOT,
    "RESTART_BM": Action.REBOOT,
    "RESTART_VM": Action.REBOOT,
    "WORKFLOW_XID_48": Action.REPLACE,
    "WORKFLOW_NVLINK_ERR": Action.REPLACE,
    "WORKFLOW_NVLINK5_ERR": Action.REPLACE,
    "CHECK_MECHANICALS": Action.REPLACE,
    "UPDATE_SWFW": Action.REPLACE,
    "UNEXPECTED_ERR_REPORT_ISSUE": Action.REPLACE,
}

#: The buckets whose GPU must be reset or the machine restarted (NVIDIA's catalog): the work
#: on that GPU is already lost, and a job left running would hang until its time limit (an
#: NCCL job until its collective times out, on every node it spans), so it is requeued at
#: once. Every other node-level fault lets the running jobs finish.
REQUEUE_BUCKETS = frozenset(("RESET_GPU", "RESTART_BM", "RESTART_VM"))

#: fmctl's rows: what the node must show.
OWN_RULES: tuple[FaultRow, ...] = (
    FaultRow("gpu-count", "GPU_MISSING", Action.REPLACE, FMCTL_SOURCE, Jobs.REQUEUE),
    FaultRow("efa-count", "EFA_MISSING", Action.REPLACE, FMCTL_SOURCE),
    FaultRow("nvlink-down", "NVLINK_DOWN", Action.REPLACE, NVLINK_SOURCE),
    FaultRow("fsx-missing", "FSX_UNAVAILABLE", Action.REPLACE, STORAGE_SOURCE),
    FaultRow("nvme-missing", "NVME_UNAVAILABLE", Action.REPLACE, STORAGE_SOURCE),
    FaultRow("row-remap-failure", "ROW_REMAP_FAILURE", Action.REPLACE, ROW_REMAP_SOURCE),
    FaultRow("row-remap-pending", "ROW_REMAP_PENDING", Action.REBOOT, ROW_REMAP_SOURCE),
    FaultRow("dcgm-health", "DCGM_HEALTH_FAILURE", Action.REPLACE, DCGM_HEALTH_SOURCE),
    FaultRow("dcgm-health-warn", "DCGM_HEALTH_WARNING", Action.NONE, DCGM_HEALTH_SOURCE),
    FaultRow("efa-errors", "EFA_ERRORS", Action.NONE, EFA_COUNTER_SOURCE, seen=Seen.EVENT),
)


def repair_budget(max_in_repair: str | int, nodes: int) -> int:
    """health.maxInRepair for a pool of ``nodes``: a count, or a share of the pool (at least
    one node), as the Slurm agent computes it and as EKS's node auto repair is told
    (maxParallelNodesRepairedCount)."""
    text = str(max_in_repair).strip()
    if text.endswith("%"):
        return max(1, nodes * int(text[:-1]) // 100)
    return int(text)


@functools.cache
def fault_table() -> tuple[FaultRow, ...]:
    """Every row: the XIDs in code order, then fmctl's own (built once: a template of EKS
    repair overrides asks for about 26 rows)."""
    rows = [
        FaultRow(
            f"xid:{code}",
            bucket,
            BUCKET_ACTION[bucket],
            XID_SOURCE,
            Jobs.REQUEUE if bucket in REQUEUE_BUCKETS else Jobs.FINISH,
            Seen.EVENT,
        )
        for bucket, codes in XID_BUCKETS.items()
        for code in codes
    ]
    rows.sort(key=lambda r: int(r.code.split(":")[1]))
    return (*rows, *OWN_RULES)


def rule(code: str) -> FaultRow | None:
    """The row for ``code`` (``xid:79``), or None: an XID the table does not know."""
    return next((r for r in fault_table() if r.code == code), None)


def as_tsv() -> str:
    """The table as the node agents read it: code, class, action, jobs, seen,
    tab-separated."""
    header = (
        "# fmctl's fault table (provisioner/catalog/faults.py): code\tclass\taction\tjobs\tseen\n"
    )
    return header + "".join(
        f"{r.code}\t{r.fault_class}\t{r.action.value}\t{r.jobs.value}\t{r.seen.value}\n"
        for r in fault_table()
    )


if __name__ == "__main__":
    print(as_tsv(), end="")
