"""What the state records about runs: who holds a cluster's lock, and the audit log's
entries. Both are JSON objects in the state; nothing secret is ever in them."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any


def stamp(seconds: float) -> str:
    """An epoch time as ISO 8601 UTC, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


@dataclass(frozen=True)
class Holder:
    """A run that holds (or held) a cluster's lock: who, where, what, since when."""

    run: str
    #: The caller's identity (STS GetCallerIdentity's ARN).
    who: str
    host: str
    pid: int
    #: The command, e.g. ``up`` or ``down``.
    command: str
    #: sha256 of the spec the run applies (first 16 hex digits); "" without one.
    spec: str
    since: float
    #: How long the lock stays the holder's after its last renewal.
    lease_s: float

    def describe(self) -> str:
        """``ARN on HOST (pid N, `fmctl up`, since T)``."""
        return (
            f"{self.who} on {self.host} (pid {self.pid}, `fmctl {self.command}`, "
            f"since {stamp(self.since)})"
        )

    def body(self, renewed: float) -> str:
        """The lock object's content at a renewal (``renewed``, epoch seconds)."""
        data = {**asdict(self), "renewed": stamp(renewed), "expires": stamp(renewed + self.lease_s)}
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def parse(cls, text: str) -> Holder | None:
        """A lock object's holder; None when it is not one fmctl wrote."""
        try:
            data = json.loads(text)
            return cls(
                run=str(data["run"]),
                who=str(data["who"]),
                host=str(data["host"]),
                pid=int(data["pid"]),
                command=str(data["command"]),
                spec=str(data.get("spec", "")),
                since=float(data["since"]),
                lease_s=float(data["lease_s"]),
            )
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class AuditEntry:
    """One run that changed (or meant to change) a cluster: `up`, an update, `down`."""

    run: str
    who: str
    host: str
    pid: int
    command: str
    spec: str
    started: float
    #: running | ok | failed | declined | lost (its lease was taken over) | unlocked
    result: str = "running"
    finished: float | None = None
    #: The plan's changes, one line each (``update nodegroup/p5en: scaling.desiredSize``).
    changes: tuple[str, ...] = field(default_factory=tuple)
    #: The run whose expired lock this one took over, with its holder.
    took_over: str | None = None
    #: Who removed this run's lock with `fmctl unlock`, and when (its end as far as the
    #: state knows: the run itself writes nothing more).
    ended_by: str | None = None

    @classmethod
    def start(cls, holder: Holder, changes: tuple[str, ...], took_over: str | None) -> AuditEntry:
        """The entry a run writes before its first change."""
        return cls(
            holder.run,
            holder.who,
            holder.host,
            holder.pid,
            holder.command,
            holder.spec,
            time.time(),
            changes=changes,
            took_over=took_over,
        )

    def finish(self, result: str) -> AuditEntry:
        """The entry once the run ended with ``result``."""
        return replace(self, result=result, finished=time.time())

    def unlocked(self, by: str) -> AuditEntry:
        """The entry of a run whose lock ``by`` removed (`fmctl unlock`)."""
        at = time.time()
        return replace(self, result="unlocked", finished=at, ended_by=f"{by} at {stamp(at)}")

    @property
    def key(self) -> str:
        """Its object's name: sorts by start time."""
        return f"audit/{stamp(self.started).replace(':', '')}-{self.run}.json"

    def as_data(self) -> dict[str, Any]:
        """JSON-able, times as ISO 8601."""
        data = asdict(self)
        data["started"] = stamp(self.started)
        data["finished"] = stamp(self.finished) if self.finished else None
        data["changes"] = list(self.changes)
        return data

    def text(self) -> str:
        """The object's content."""
        data = asdict(self)
        data["changes"] = list(self.changes)
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def parse(cls, text: str) -> AuditEntry | None:
        """An audit object's entry; None when unreadable."""
        try:
            data = json.loads(text)
            data["changes"] = tuple(data.get("changes", ()))
            return cls(**data)
        except (ValueError, TypeError):
            return None
