"""fmctl's budget stop, run by AWS Lambda (python3.12, boto3 from the runtime) when AWS
Budgets tells the cluster's SNS topic that its budget is spent: every GPU node group is
scaled to zero through the scheduler's own API, so no controller relaunches what a stopped
instance would leave (EKS: UpdateNodegroupConfig to 0; PCS: UpdateComputeNodeGroup to 0..0;
ParallelCluster: the compute fleet's status set to STOP_REQUESTED).

``calls.json`` beside this file lists the calls, as fmctl planned them for the cluster's ttl
schedules: ``[{"action": "service:apiAction", "input": {...}}]``. Every call is tried; the
invocation fails if one did, so Lambda tries the event again (twice, for an asynchronous
invocation such as SNS's).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import boto3

#: What the calls' inputs say where the time of the stop goes (the schedules' placeholder).
STAMP = "<aws.scheduler.scheduled-time>"


def snake(action: str) -> str:
    """boto3's method name of an API action (updateNodegroupConfig -> update_nodegroup_config)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", action).lower()


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Make every call; what was stopped, or an error naming what was not."""
    calls = json.loads((Path(__file__).parent / "calls.json").read_text())
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    subjects = [r.get("Sns", {}).get("Subject", "") for r in event.get("Records", [])]
    done, failed = [], []
    for call in calls:
        service, action = call["action"].split(":", 1)
        params = json.loads(json.dumps(call["input"]).replace(STAMP, stamp))
        try:
            getattr(boto3.client(service), snake(action))(**params)
        except Exception as exc:  # every call is tried; the failures are reported below
            failed.append(f"{call['action']}: {exc}")
            continue
        done.append(call["action"])
    print(json.dumps({"told": subjects, "done": done, "failed": failed}))
    if failed:
        raise RuntimeError("; ".join(failed))
    return {"done": done}
