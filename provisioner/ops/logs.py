"""`fmctl logs`: what fmctl did to a cluster (its event log), and what the cluster's AWS side
logged (CloudWatch Logs), in one time-ordered view.

- fmctl's events: this machine's ``HOME/clusters/NAME/events.log`` (one JSON object a line).
- EKS: the control-plane group ``/aws/eks/NAME/cluster`` (EKS User Guide, "Send control
  plane logs to CloudWatch Logs"), one stream per log type and instance.
- ParallelCluster: ``/aws/parallelcluster/NAME-YYYYMMDDhhmm``, one stream per node and log,
  named ``HOSTNAME.INSTANCE-ID.LOG`` (ParallelCluster's own tests and docs). A create that
  failed on the head node says why in its ``cfn-init``, ``chef-client`` and
  ``cloud-init-output`` streams: ``failure`` shows those.

Reads only; nothing is written but what ``export`` asks for.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner.ops.target import Target
from provisioner.resources.logs import control_plane_group

#: The head node's logs that hold why a ParallelCluster create failed, most telling first.
FAILURE_STREAMS = ("cfn-init", "chef-client", "cloud-init-output")


@dataclass(frozen=True)
class LogLine:
    """One line of the view: when, where from, what."""

    at: float
    source: str
    text: str

    def as_data(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"time": self.at, "source": self.source, "text": self.text}


def parse_since(text: str) -> float | None:
    """``30m``, ``1h``, ``2d`` -> seconds (None when it is not one)."""
    match = re.fullmatch(r"(\d+)([smhd])", text.strip())
    if not match:
        return None
    return int(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]


def fmctl_events(home: Path, name: str, since: float) -> list[LogLine]:
    """This machine's record of what fmctl did to the cluster."""
    path = home / "clusters" / name / "events.log"
    lines = []
    try:
        raw = path.read_text().splitlines()
    except OSError:
        return []
    for line in raw:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        at = float(event.get("time", 0))
        if at < since:
            continue
        detail = f"  {event['detail']}" if event.get("detail") else ""
        lines.append(LogLine(at, "fmctl", f"{event.get('resource')} {event.get('state')}{detail}"))
    return lines


def cluster_groups(target: Target, name: str) -> list[str]:
    """The cluster's log groups that exist: EKS's, and ParallelCluster's (one per create)."""
    logs = target.aws(read_only=True).client("logs")
    found = []
    for prefix, pattern in (
        (control_plane_group(name), re.escape(control_plane_group(name)) + "$"),
        (f"/aws/parallelcluster/{name}-", rf"/aws/parallelcluster/{re.escape(name)}-\d{{12}}$"),
    ):
        pages = logs.get_paginator("describe_log_groups").paginate(logGroupNamePrefix=prefix)
        for page in pages:
            found += [
                g["logGroupName"] for g in page["logGroups"] if re.match(pattern, g["logGroupName"])
            ]
    return sorted(found)


def group_events(
    target: Target, group: str, since: float, stream: str | None, limit: int
) -> list[LogLine]:
    """Events of one group since ``since`` (``stream``: only streams whose name holds it),
    the newest ``limit`` of them."""
    logs = target.aws(read_only=True).client("logs")
    events: list[LogLine] = []
    pages = logs.get_paginator("filter_log_events").paginate(
        logGroupName=group, startTime=int(since * 1000)
    )
    for page in pages:
        for e in page.get("events", []):
            name = str(e.get("logStreamName", ""))
            if stream and stream not in name:
                continue
            events.append(LogLine(e["timestamp"] / 1000, f"{group} {name}", e["message"]))
    events.sort(key=lambda line: line.at)
    return events[-limit:]


def failure_streams(target: Target, group: str) -> list[str]:
    """The head node's streams of a ParallelCluster group that say why a create failed."""
    logs = target.aws(read_only=True).client("logs")
    streams = []
    for page in logs.get_paginator("describe_log_streams").paginate(logGroupName=group):
        streams += [s["logStreamName"] for s in page["logStreams"]]
    order = {suffix: i for i, suffix in enumerate(FAILURE_STREAMS)}
    chosen = [s for s in streams if s.rsplit(".", 1)[-1] in order]
    return sorted(chosen, key=lambda s: (order[s.rsplit(".", 1)[-1]], s))


def stream_tail(target: Target, group: str, stream: str, lines: int) -> list[LogLine]:
    """The last ``lines`` events of one stream."""
    logs = target.aws(read_only=True).client("logs")
    found = logs.get_log_events(
        logGroupName=group, logStreamName=stream, limit=lines, startFromHead=False
    )
    return [
        LogLine(e["timestamp"] / 1000, f"{group} {stream}", e["message"])
        for e in found.get("events", [])
    ]


def export(lines: list[LogLine], folder: Path) -> list[Path]:
    """One file per source under ``folder`` (its name made safe), time-ordered lines."""
    folder.mkdir(parents=True, exist_ok=True)
    by_source: dict[str, list[LogLine]] = {}
    for line in lines:
        by_source.setdefault(line.source, []).append(line)
    written = []
    for source, items in sorted(by_source.items()):
        path = folder / (re.sub(r"[^A-Za-z0-9._-]+", "_", source).strip("_") + ".log")
        path.write_text(
            "".join(
                f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(i.at))} {i.text}\n"
                for i in sorted(items, key=lambda x: x.at)
            )
        )
        written.append(path)
    return written
