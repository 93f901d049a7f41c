"""The PCS shim's model: its errors, its objects, the durations it gives them, and the
checks every request goes through (botocore's ``pcs`` input shapes and their patterns, the
subnets and security groups in the emulator's EC2); ``sandbox.pcs`` serves the API."""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from fmctl_sandbox.protocol import Call

Answer = tuple[int, dict[str, str], bytes]

DURATIONS = {
    "cluster-create": 600.0,
    "cluster-update": 120.0,
    "cluster-delete": 300.0,
    "group-create": 300.0,
    "group-update": 180.0,
    "group-delete": 180.0,
    "queue-create": 30.0,
    "queue-update": 30.0,
    "queue-delete": 30.0,
}
#: States a resource cannot be deleted in (ConflictException's documentation: "A cluster to
#: delete is in an unstable state").
UNSTABLE = ("CREATING", "UPDATING")
#: The Slurm versions CreateCluster and UpdateCluster take (botocore 1.44.8's pcs model:
#: SchedulerRequest "24.11 | 25.05 | 25.11 | 26.05"; UpdateSchedulerRequest adds 24.05, and
#: "You can only update to a newer version").
CREATE_VERSIONS = ("24.11", "25.05", "25.11", "26.05")
UPDATE_VERSIONS = ("24.05", *CREATE_VERSIONS)
#: After these days PCS creates no new cluster on the version (AWS PCS User Guide, "Slurm
#: versions in AWS PCS": 24.11 on 2026-05-31, 25.05 on 2026-11-30; later ones unpublished).
#: The sandbox's own table, not fmctl's catalog, so a mistake there shows against it. The
#: error PCS answers with is not documented: ValidationException, as for a version it has
#: never run, is the sandbox's choice.
END_OF_LIFE = {"24.05": date(2025, 11, 30), "24.11": date(2026, 5, 31), "25.05": date(2026, 11, 30)}
CLUSTER_TAG = "aws:pcs:cluster-id"
GROUP_TAG = "aws:pcs:compute-node-group-id"


class PcsError(Exception):
    """An error answer: its code and message, as botocore parses them."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


@dataclass
class Thing:
    """A cluster, node group or queue, with its lifecycle."""

    data: dict[str, Any]
    kind: str  # cluster | group | queue
    ready_at: float
    gone_at: float | None = None
    #: An update on its way: the fields it sets when it lands.
    landing: dict[str, Any] | None = None
    #: EC2 instances a node group runs.
    instances: list[str] = field(default_factory=list)


def instance_ids(backend: Any) -> set[str]:
    return {i.id for r in backend.reservations.values() for i in r.instances}


def today() -> date:
    """The sandbox's day: FMCTL_SANDBOX_TODAY (YYYY-MM-DD, for a test that needs another
    day) or the machine's."""
    given = os.environ.get("FMCTL_SANDBOX_TODAY")
    return date.fromisoformat(given) if given else date.today()


def check_create_version(version: str, day: date) -> None:
    """CreateCluster's version: one PCS runs, not past its end of life on ``day``."""
    if version not in CREATE_VERSIONS:
        raise PcsError("ValidationException", "The scheduler version isn't supported.")
    end = END_OF_LIFE.get(version)
    if end is not None and day > end:
        raise PcsError(
            "ValidationException",
            f"Slurm {version} reached end of life on {end}: new clusters cannot use it.",
        )


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def check_update_version(current: str, wanted: str) -> None:
    """UpdateCluster's scheduler: a version PCS runs, newer than the cluster's."""
    if wanted not in UPDATE_VERSIONS:
        raise PcsError("ValidationException", "The scheduler version isn't supported.")
    if version_key(wanted) <= version_key(current):
        raise PcsError(
            "ValidationException",
            f"You can only update to a newer version than {current}, not {wanted}.",
        )


def stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def new_id() -> str:
    return "pcs_" + uuid.uuid4().hex[:10]


def validate(call: Call) -> None:
    """The request against botocore's ``pcs`` input shape (PCS's ValidationException)."""
    from botocore.exceptions import ParamValidationError
    from botocore.validate import ParamValidator

    model = service_model()
    try:
        operation = model.operation_model(call.action)
    except Exception as exc:
        raise PcsError("UnknownOperationException", str(exc)) from exc
    report = ParamValidator().validate(call.params, operation.input_shape)
    if report.has_errors():
        raise PcsError(
            "ValidationException", str(ParamValidationError(report=report.generate_report()))
        )
    bad = pattern_errors(operation.input_shape, call.params, call.action)
    if bad:
        raise PcsError("ValidationException", "; ".join(bad))


def pattern_errors(shape: Any, value: Any, where: str) -> list[str]:
    """Values that break their shape's ``pattern``, ``enum`` or ``max`` (botocore checks
    types and minimum lengths before sending, not these; PCS does, with a
    ValidationException)."""
    import re

    if shape.type_name == "structure" and isinstance(value, dict):
        return [
            bad
            for key, item in value.items()
            if key in shape.members
            for bad in pattern_errors(shape.members[key], item, f"{where}.{key}")
        ]
    longest = shape.metadata.get("max")
    if shape.type_name == "list" and isinstance(value, list):
        too_many = (
            [f"{where}: {len(value)} members, at most {longest}"]
            if longest is not None and len(value) > longest
            else []
        )
        return too_many + [
            bad
            for i, v in enumerate(value)
            for bad in pattern_errors(shape.member, v, f"{where}[{i}]")
        ]
    if shape.type_name != "string":
        return []
    text = str(value)
    pattern = shape.metadata.get("pattern")
    if pattern and not re.search(pattern, text):
        return [f"{where}: {value!r} does not match {pattern}"]
    if shape.enum and text not in shape.enum:
        return [f"{where}: {value!r} is not one of {', '.join(shape.enum)}"]
    if longest is not None and len(text) > longest:
        return [f"{where}: {len(text)} characters, at most {longest}"]
    return []


def service_model() -> Any:
    import botocore.session

    global _MODEL
    if _MODEL is None:
        _MODEL = botocore.session.get_session().get_service_model("pcs")
    return _MODEL


_MODEL: Any = None


def need_active(cluster: Thing) -> None:
    if cluster.data["status"] != "ACTIVE":
        raise PcsError(
            "ConflictException",
            f"cluster {cluster.data['id']} isn't in ACTIVE status ({cluster.data['status']})",
        )


def busy(thing: Thing) -> None:
    if thing.data["status"] != "ACTIVE":
        raise PcsError(
            "ConflictException",
            f"{thing.data['id']} is {thing.data['status']}: one operation at a time",
        )


def check_subnets(account: str, region: str, subnets: list[str]) -> None:
    from moto.ec2.models import ec2_backends

    backend = ec2_backends[account][region]
    for subnet in subnets:
        try:
            backend.get_subnet(subnet)
        except Exception as exc:
            raise PcsError("ValidationException", f"subnet {subnet} is not valid") from exc


def check_groups(account: str, region: str, groups: list[str]) -> None:
    from moto.ec2.models import ec2_backends

    backend = ec2_backends[account][region]
    for group in groups:
        if backend.get_security_group_from_id(group) is None:
            raise PcsError("ValidationException", f"security group {group} is not valid")
