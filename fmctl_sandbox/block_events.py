"""EC2's Capacity Block expiration warning, on the sandbox's clock, and EventBridge sending
it to the rules that match (moto stores rules and targets but nothing sends EC2's events,
and its own delivery has no Run Command targets).

What it follows:

- The EC2 User Guide, "Monitor Capacity Blocks using EventBridge": forty minutes before a
  Capacity Block ends, EC2 sends ``source: aws.ec2`` with the detail-type "Capacity Block
  Reservation Expiration Warning" (the guide's other version says "Capacity Block
  Expiration Warning"; the sandbox sends the first), ``resources`` the reservation's ARN and
  ``detail`` its ``capacity-reservation-id`` and ``end-date``. Once per block.
- A rule on the default bus whose pattern matches (moto's own matcher) and is ENABLED sends
  the event to each target. A Run Command target (``arn:aws:ssm:REGION::document/NAME``)
  becomes SendCommand of that document, its parameters the target's Input, on the instances
  of RunCommandParameters (one key: ``InstanceIds`` or ``tag:KEY``), as the target's role,
  which must trust ``events.amazonaws.com`` and be allowed ssm:SendCommand (``iam_eval``).
  Other targets are not the sandbox's to run: their outcome says so.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fmctl_sandbox import iam_eval
from fmctl_sandbox.scheduler_run import CallAs

DETAIL_TYPE = "Capacity Block Reservation Expiration Warning"
PRINCIPAL = "events.amazonaws.com"
#: The warning comes this long before the block's end.
LEAD_SECONDS = 40 * 60


@dataclass
class Warnings:
    """The blocks warned of: (account, region, reservation id)."""

    sent: set[tuple[str, str, str]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def due(
        self, blocks: list[tuple[str, str, dict[str, Any]]], now: float
    ) -> list[tuple[str, str, dict[str, Any]]]:
        """The events EC2 sends by ``now``, each (account, region, event) once: ``blocks``
        are (account, region, reservation) of every Capacity Block."""
        out = []
        with self.lock:
            for account, region, res in blocks:
                end = _epoch(res.get("endDate"))
                key = (account, region, str(res["capacityReservationId"]))
                if end is None or key in self.sent or end - LEAD_SECONDS > now:
                    continue
                self.sent.add(key)
                out.append((account, region, event(account, region, res, now)))
        return out


def _epoch(text: Any) -> float | None:
    if not text:
        return None
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


def event(account: str, region: str, res: dict[str, Any], now: float) -> dict[str, Any]:
    """The warning as EventBridge delivers it."""
    rid = str(res["capacityReservationId"])
    return {
        "version": "0",
        "id": f"{rid}-approaching-expiry",
        "detail-type": DETAIL_TYPE,
        "source": "aws.ec2",
        "account": account,
        "time": datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [f"arn:aws:ec2:{region}:{account}:capacity-reservation/{rid}"],
        "detail": {"capacity-reservation-id": rid, "end-date": str(res.get("endDate"))},
    }


def deliver(account: str, region: str, sent: dict[str, Any], call: CallAs) -> list[dict[str, Any]]:
    """Send ``sent`` to the matching rules' targets; what each delivery did."""
    from moto.events.models import events_backends

    bus = events_backends[account][region].event_buses.get("default")
    rules = [] if bus is None else list(bus.rules.values())
    out = []
    for rule in rules:
        if rule.state != "ENABLED" or not rule.event_pattern.matches_event(sent):  # type: ignore[arg-type]
            continue
        for target in list(rule.targets):
            said = {"rule": rule.name, "target": str(target.get("Arn", "")), "event": sent["id"]}
            out.append({**said, **_run_command(account, region, rule.arn, target, call)})
    return out


def _run_command(
    account: str, region: str, rule: str, target: dict[str, Any], call: CallAs
) -> dict[str, Any]:
    arn = str(target.get("Arn", ""))
    prefix = f"arn:aws:ssm:{region}::document/"
    if not arn.startswith(prefix):
        return {"outcome": "failed", "error": "not a Run Command target the sandbox runs"}
    picks = (target.get("RunCommandParameters") or {}).get("RunCommandTargets") or []
    if len(picks) != 1:
        return {"outcome": "failed", "error": "a Run Command target takes one RunCommandTarget"}
    key, values = str(picks[0].get("Key", "")), list(picks[0].get("Values") or [])
    if key != "InstanceIds" and not key.startswith("tag:"):
        return {
            "outcome": "failed",
            "error": f"a RunCommandTarget's key is InstanceIds or tag:KEY, not {key}",
        }
    params: dict[str, Any] = {
        "DocumentName": arn[len(prefix) :],
        "Parameters": json.loads(str(target.get("Input") or "{}")),
        "Targets": [{"Key": key, "Values": values}],
    }
    role = str(target.get("RoleArn", ""))
    documents = iam_eval.role_documents(account, role, PRINCIPAL, rule)
    if isinstance(documents, str):
        return {"outcome": "failed", "error": f"AccessDenied: {documents}"}
    refused = iam_eval.refused(
        documents, role.rsplit("/", 1)[-1], "ssm", "sendCommand", region, account, params
    )
    if refused:
        return {"outcome": "failed", "error": f"AccessDenied: {refused}"}
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        sent = call.client(region, "ssm").send_command(**params)
    except (BotoCoreError, ClientError) as err:
        return {"outcome": "failed", "error": str(err)}
    return {"outcome": "sent", "command": sent["Command"]["CommandId"]}
