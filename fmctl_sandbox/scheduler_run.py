"""EventBridge Scheduler running its schedules, which moto stores but never runs, on a clock
a test (or `fmctl sandbox advance`) can move.

What it follows (the EventBridge Scheduler User Guide and API reference, 2021-06-30):

- A one-time schedule ``at(yyyy-mm-ddThh:mm:ss)`` in its ``ScheduleExpressionTimezone``
  (UTC here) runs once, when due, if its ``State`` is ENABLED.
- A universal target ``arn:aws:scheduler:::aws-sdk:SERVICE:apiAction`` calls that API with
  the target's ``Input`` as its parameters (the API's member names), in the schedule's
  region, as the target's role: the role must trust ``scheduler.amazonaws.com`` and its
  policies must allow the action on the resource, or the call fails with AccessDenied.
- ``<aws.scheduler.scheduled-time>`` and the other context attributes in the Input are
  replaced before the call.

The call goes to the sandbox itself, over HTTPS with its own credentials, through botocore:
an Input that is not the API's parameters fails botocore's validation as it fails AWS's.
The role's policies are judged by ``iam_eval``: Allow statements only, on the resource ARNs
AWS's Service Authorization Reference gives for the calls fmctl's schedules make; any other
action is refused, so a schedule the sandbox cannot judge fails rather than passing
unchecked.

moto's own mends: CreateScheduleGroup of a name that exists answers ConflictException and
DeleteScheduleGroup of one that does not ResourceNotFoundException (the API reference's
errors; moto 5.2 overwrites the first and fails with a KeyError on the second), and a
deleted group's tags go with it (moto 5.2 keeps them for the next group of the name).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fmctl_sandbox import iam_eval
from fmctl_sandbox.ssm_agent import Others

UNIVERSAL = "arn:aws:scheduler:::aws-sdk:"
PRINCIPAL = "scheduler.amazonaws.com"


@dataclass
class Runner:
    """The schedules that ran, and how far the clock was moved."""

    offset: float = 0.0
    #: (schedule ARN, expression) of each one-time schedule that ran.
    ran: set[tuple[str, str]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        """The sandbox's time for schedules."""
        return time.time() + self.offset

    def advance(self, seconds: float, call: CallAs, state: threading.RLock) -> list[dict[str, Any]]:
        """Move the clock on and run every schedule that is due; what each run did. The
        schedules are read under ``state`` (the lock over AWS's state); the calls are made
        without it, as requests of their own."""
        with self.lock, state:
            self.offset += max(seconds, 0.0)
            due = [
                s
                for s in _schedules()
                if (s[3].arn, s[3].schedule_expression) not in self.ran and _due(s[3], self.now())
            ]
            for *_, schedule in due:
                self.ran.add((schedule.arn, schedule.schedule_expression))
        return [_run(a, region, schedule, self.now(), call) for a, region, _, schedule in due]


class CallAs:
    """How a run reaches the sandbox: a botocore client per (region, service); ``others``
    gives an account's instances in a region that moto does not hold, with their tags (the
    EKS nodes a Run Command may name)."""

    def __init__(
        self,
        endpoint: str,
        ca: str,
        key: str,
        secret: str,
        others: Callable[[str, str], Others] = lambda account, region: {},
    ) -> None:
        self.endpoint, self.ca, self.key, self.secret = endpoint, ca, key, secret
        self.others = others

    def client(self, region: str, service: str) -> Any:
        import botocore.session
        from botocore.config import Config

        session = botocore.session.Session(session_vars={"profile": (None, None, None, None)})
        return session.create_client(
            service,
            region_name=region,
            endpoint_url=self.endpoint,
            verify=self.ca,
            aws_access_key_id=self.key,
            aws_secret_access_key=self.secret,
            config=Config(retries={"total_max_attempts": 1}),
        )


def _schedules() -> list[tuple[str, str, str, Any]]:
    from moto.scheduler.models import scheduler_backends

    found = []
    for account, regions in scheduler_backends.items():
        for region, backend in regions.items():
            for group in list(backend.schedule_groups.values()):
                for schedule in list(group.schedules.values()):
                    found.append((account, region, group.name, schedule))
    return found


def _due(schedule: Any, now: float) -> bool:
    expression = str(schedule.schedule_expression)
    if schedule.state != "ENABLED" or not expression.startswith("at("):
        return False
    if (schedule.schedule_expression_timezone or "UTC") != "UTC":
        return False  # fmctl's are UTC; another zone is not judged here
    at = datetime.strptime(expression[3:-1], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    return at.timestamp() <= now


def _run(account: str, region: str, schedule: Any, now: float, call: CallAs) -> dict[str, Any]:
    target = schedule.target
    arn = str(target.get("Arn", ""))
    said: dict[str, Any] = {"schedule": schedule.arn, "target": arn}
    if not arn.startswith(UNIVERSAL):
        return {**said, "outcome": "failed", "error": "not a universal target the sandbox runs"}
    service, action = arn[len(UNIVERSAL) :].split(":", 1)
    text = str(target.get("Input", "{}"))
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = text.replace("<aws.scheduler.scheduled-time>", stamp)
    text = text.replace("<aws.scheduler.schedule-arn>", str(schedule.arn))
    try:
        params = json.loads(text)
    except ValueError as err:
        return {**said, "outcome": "failed", "error": f"Input is not JSON: {err}"}
    group = f"arn:aws:scheduler:{region}:{account}:schedule-group/{schedule.group_name}"
    role = str(target.get("RoleArn", ""))
    others = call.others(account, region)
    refused = _denied(account, role, group, service, action, region, params, others)
    if refused:
        return {**said, "outcome": "failed", "error": f"AccessDenied: {refused}"}
    from botocore import xform_name
    from botocore.exceptions import BotoCoreError, ClientError

    client = call.client(region, service)
    try:
        getattr(client, xform_name(action))(**params)
    except (BotoCoreError, ClientError, AttributeError) as err:
        return {**said, "outcome": "failed", "error": str(err)}
    return {**said, "outcome": "succeeded"}


def _denied(
    account: str,
    role_arn: str,
    group: str,
    service: str,
    action: str,
    region: str,
    params: dict[str, Any],
    others: Others,
) -> str | None:
    """Why the role may not make the call for a schedule of ``group``, or None when it may
    (``iam_eval``)."""
    documents = iam_eval.role_documents(account, role_arn, PRINCIPAL, group)
    if isinstance(documents, str):
        return documents
    name = role_arn.rsplit("/", 1)[-1]
    return iam_eval.refused(documents, name, service, action, region, account, params, others)


def mend() -> None:
    """moto's schedule groups, as the API reference has them (see the module's docstring)."""
    from moto.scheduler.exceptions import ScheduleGroupNotFound
    from moto.scheduler.models import EventBridgeSchedulerBackend

    if getattr(EventBridgeSchedulerBackend, "_fmctl_mended", False):
        return
    create, delete = (
        EventBridgeSchedulerBackend.create_schedule_group,
        EventBridgeSchedulerBackend.delete_schedule_group,
    )

    def create_group(self: Any, name: str, tags: list[dict[str, str]]) -> Any:
        from moto.core.exceptions import JsonRESTError

        if name in self.schedule_groups:
            conflict = JsonRESTError("ConflictException", f"Schedule group {name} exists.")
            conflict.code = 409
            raise conflict
        return create(self, name, tags)

    def delete_group(self: Any, name: str | None) -> None:
        if (name or "default") not in self.schedule_groups:
            raise ScheduleGroupNotFound(name or "default")
        arn = self.schedule_groups[name or "default"].arn
        delete(self, name)
        # Its tags go with it (moto keeps them, and a new group of the name inherited them).
        self.tagger.delete_all_tags_for_resource(arn)

    EventBridgeSchedulerBackend.create_schedule_group = create_group  # type: ignore[method-assign]
    EventBridgeSchedulerBackend.delete_schedule_group = delete_group  # type: ignore[method-assign]
    EventBridgeSchedulerBackend._fmctl_mended = True  # type: ignore[attr-defined]
