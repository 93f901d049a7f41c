"""What the sandbox's Kueue stand-in reads and writes on its objects: Kubernetes quantities as
numbers, a Workload's Job and conditions (QuotaReserved, Admitted, Finished: Kueue's
Workload status, kueue.x-k8s.io/v1beta2), a Job's end. ``fmctl_sandbox.kube_kueue``
says what the stand-in does and leaves out.
"""

from __future__ import annotations

import re
import time
from fractions import Fraction
from typing import Any

_SUFFIX: dict[str, int | Fraction] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "m": Fraction(1, 1000),
}


def quantity(text: Any) -> Fraction:
    """A Kubernetes quantity ("64Gi", "500m", 16) as a number."""
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(text).strip())
    if match is None:
        return Fraction(0)
    scale: int | Fraction = _SUFFIX.get(match.group(2), 1)
    return Fraction(match.group(1)) * scale


def show(value: Fraction) -> str:
    return str(int(value)) if value.denominator == 1 else f"{float(value):g}"


def owner_job(wl: dict[str, Any]) -> str | None:
    for ref in wl["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "Job":
            return str(ref.get("name"))
    return None


def job_finished(job: dict[str, Any]) -> bool:
    return any(
        x.get("type") in ("Complete", "Failed") and x.get("status") == "True"
        for x in (job.get("status") or {}).get("conditions") or []
    )


def condition(wl: dict[str, Any], kind: str) -> bool:
    return any(
        x.get("type") == kind and x.get("status") == "True"
        for x in (wl.get("status") or {}).get("conditions") or []
    )


def is_pending(wl: dict[str, Any]) -> bool:
    return not condition(wl, "QuotaReserved") and not condition(wl, "Finished")


def set_condition(wl: dict[str, Any], kind: str, status: str, reason: str, message: str) -> None:
    conditions = [
        x for x in (wl.setdefault("status", {}).get("conditions") or []) if x.get("type") != kind
    ]
    conditions.append(
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "observedGeneration": wl["metadata"].get("generation", 1),
        }
    )
    wl["status"]["conditions"] = conditions


def pending(wl: dict[str, Any], reason: str, message: str) -> None:
    set_condition(wl, "QuotaReserved", "False", reason, message)
