"""What `status` says of Kueue and NVIDIA's ComputeDomains on an EKS cluster: each
ClusterQueue with its pending and admitted workloads (and why a pending one waits, Kueue's
own words from its QuotaReserved condition), and each ComputeDomain with its nodes' state.
Read-only; a cluster without Kueue or the DRA driver (their kinds not served) has none."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from provisioner.drivers.kube import KubeApi, KubeError

KUEUE = "kueue.x-k8s.io/v1beta2"
DOMAINS = "resource.nvidia.com/v1beta1"


@dataclass(frozen=True)
class WorkloadRow:
    """One Kueue Workload (a queued job)."""

    namespace: str
    name: str
    state: str  # pending | admitted | finished
    pods: int
    flavor: str = ""
    reason: str = ""

    def as_data(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "namespace": self.namespace,
            "name": self.name,
            "state": self.state,
            "pods": self.pods,
            "flavor": self.flavor,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class QueueRow:
    """A ClusterQueue and its workloads."""

    name: str
    pending: int
    admitted: int
    workloads: tuple[WorkloadRow, ...] = ()

    def as_data(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "name": self.name,
            "pending": self.pending,
            "admitted": self.admitted,
            "workloads": [w.as_data() for w in self.workloads],
        }


@dataclass(frozen=True)
class DomainRow:
    """A ComputeDomain: its state and its nodes (ready of listed)."""

    namespace: str
    name: str
    status: str
    nodes: int
    ready: int

    def as_data(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "namespace": self.namespace,
            "name": self.name,
            "status": self.status,
            "nodes": self.nodes,
            "ready": self.ready,
        }


def _list(api: KubeApi, api_version: str, kind: str) -> list[dict[str, Any]]:
    try:
        return api.list(api_version, kind)
    except KubeError as err:
        if err.status == 404:  # the kind is not served: no Kueue / no DRA driver
            return []
        raise


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def _workload(wl: dict[str, Any], queues: dict[tuple[str, str], str]) -> tuple[str, WorkloadRow]:
    meta, spec = wl["metadata"], wl.get("spec") or {}
    pods = sum(int(p.get("count", 1)) for p in spec.get("podSets") or [])
    finished = (_condition(wl, "Finished") or {}).get("status") == "True"
    admitted = (_condition(wl, "Admitted") or {}).get("status") == "True"
    admission = (wl.get("status") or {}).get("admission") or {}
    flavors = {
        f
        for a in admission.get("podSetAssignments") or []
        for f in (a.get("flavors") or {}).values()
    }
    reserved = _condition(wl, "QuotaReserved") or {}
    state = "finished" if finished else "admitted" if admitted else "pending"
    queue = admission.get("clusterQueue") or queues.get(
        (meta.get("namespace", ""), str(spec.get("queueName", ""))), "?"
    )
    row = WorkloadRow(
        meta.get("namespace", ""),
        meta["name"],
        state,
        pods,
        ",".join(sorted(flavors)),
        "" if state != "pending" else str(reserved.get("message", "waiting for Kueue")),
    )
    return str(queue), row


def queues(api: KubeApi) -> tuple[QueueRow, ...]:
    """Every ClusterQueue with its workloads (finished ones left out)."""
    cluster_queues = _list(api, KUEUE, "ClusterQueue")
    if not cluster_queues:
        return ()
    local = {
        (q["metadata"].get("namespace", ""), q["metadata"]["name"]): str(
            (q.get("spec") or {}).get("clusterQueue", "")
        )
        for q in _list(api, KUEUE, "LocalQueue")
    }
    by_queue: dict[str, list[WorkloadRow]] = {}
    for wl in _list(api, KUEUE, "Workload"):
        queue, row = _workload(wl, local)
        if row.state != "finished":
            by_queue.setdefault(queue, []).append(row)
    out = []
    for q in cluster_queues:
        name = q["metadata"]["name"]
        rows = tuple(sorted(by_queue.get(name, []), key=lambda r: (r.state, r.namespace, r.name)))
        out.append(
            QueueRow(
                name,
                sum(r.state == "pending" for r in rows),
                sum(r.state == "admitted" for r in rows),
                rows,
            )
        )
    return tuple(out)


def domains(api: KubeApi) -> tuple[DomainRow, ...]:
    """Every ComputeDomain, with how many of its nodes are ready."""
    out = []
    for cd in _list(api, DOMAINS, "ComputeDomain"):
        status = cd.get("status") or {}
        nodes = status.get("nodes") or []
        out.append(
            DomainRow(
                cd["metadata"].get("namespace", ""),
                cd["metadata"]["name"],
                str(status.get("status", "NotReady")),
                len(nodes),
                sum(n.get("status") == "Ready" for n in nodes),
            )
        )
    return tuple(sorted(out, key=lambda d: (d.namespace, d.name)))
