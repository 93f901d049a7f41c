"""A PCS compute node group's instance health checks in the sandbox: the rules botocore's PCS
model documents for ``instanceHealthChecks`` (CreateComputeNodeGroup and
UpdateComputeNodeGroup), which ``fmctl_sandbox.pcs`` applies to both.
"""

from __future__ import annotations

from typing import Any

from fmctl_sandbox.pcs_model import PcsError

_MODES = ("NONE", "STANDARD")
_PROFILES = ("NONE", "QUICK", "MEDIUM", "LONG")
_REPAIRS = ("AUTO", "REPLACE", "ISOLATE", "NONE")


def _nvidia(instance_type: str) -> bool:
    """Whether the type has NVIDIA GPUs, by moto's EC2 instance-type data; a type moto does
    not list is taken as having them (the sandbox cannot tell)."""
    from moto.ec2.models.instance_types import INSTANCE_TYPES

    known = INSTANCE_TYPES.get(instance_type)
    if known is None:
        return True
    gpus = (known.get("GpuInfo") or {}).get("Gpus") or []
    return any(g.get("Manufacturer") == "NVIDIA" for g in gpus)


def health_checks(checks: dict[str, Any] | None, instance_type: str) -> None:
    """instanceHealthChecks as botocore's PCS model documents it (InstanceHealthChecksRequest,
    HealthMonitoring, DeepHealthChecks and their enums): no empty object; healthMonitoring
    needs its mode, and no repairAction with mode NONE; deepHealthChecks' onStart needs its
    profile, no repairAction with profile NONE, and a profile other than NONE needs an
    instance type with NVIDIA GPUs."""
    if checks is None:
        return

    def refuse(why: str) -> None:
        raise PcsError("ValidationException", f"instanceHealthChecks: {why}")

    if not checks:
        refuse("you can't specify an empty object ({})")
    monitoring = checks.get("healthMonitoring")
    if monitoring is not None:
        if "mode" not in monitoring:
            refuse("healthMonitoring.mode is required when you specify healthMonitoring")
        if monitoring["mode"] not in _MODES:
            refuse(f"healthMonitoring.mode must be one of {', '.join(_MODES)}")
        if monitoring.get("repairAction") not in (None, *_REPAIRS):
            refuse(f"healthMonitoring.repairAction must be one of {', '.join(_REPAIRS)}")
        if monitoring["mode"] == "NONE" and "repairAction" in monitoring:
            refuse("you can't specify healthMonitoring.repairAction when mode is NONE")
    deep = checks.get("deepHealthChecks")
    if deep is not None:
        if not deep:
            refuse("deepHealthChecks can't be empty")
        start = deep.get("onStart")
        if start is not None:
            if start.get("profile") not in _PROFILES:
                refuse(f"deepHealthChecks.onStart.profile must be one of {', '.join(_PROFILES)}")
            if start.get("repairAction") not in (None, *_REPAIRS):
                refuse(
                    f"deepHealthChecks.onStart.repairAction must be one of {', '.join(_REPAIRS)}"
                )
            if start["profile"] == "NONE" and "repairAction" in start:
                refuse("you can't specify deepHealthChecks.onStart.repairAction with profile NONE")
            if start["profile"] != "NONE" and not _nvidia(instance_type):
                refuse(f"a profile other than NONE requires NVIDIA GPUs; {instance_type} has none")
