"""What `fmctl health NAME` shows: every node's place in the health loop, its last fault, how
long it has been there, and each pool's repair budget.

On Slurm the controller is the record (slurm/lib/cluster-health.sh prints it through Run
Command): the reason a node was drained with, and its time, say what the node agent
(slurm/lib/health-agent.sh) or someone else did; the agent keeps a fault it holds in the
node's Comment. A node's state:

- ``healthy``: in service, nothing held;
- ``suspect``: in service, with a node-level fault the agent did not act on (its repair
  budget was spent);
- ``draining``: drained by the agent, jobs still running;
- ``repairing``: drained by the agent and idle (on ParallelCluster, clustermgtd replaces it:
  its own reason "Static node maintenance: unhealthy node is being replaced",
  aws-parallelcluster-node clustermgtd.py at 2e8f9a8; on PCS the agent reboots it into its
  nodeBootstrapped stage, which fails for it, and PCS replaces the instance), or rebooting;
- ``verifying``: out of service until the verify gate passes (reason ``fmctl-health:
  verifying``), or held for its 2-node NCCL pair (reservation ``fmctl-verify-NODE``,
  slurm/lib/verify-pair.sh);
- ``drained``: out of service until a person acts: taken out by someone else, with their
  reason (the agent leaves it alone), or drained by the agent where nothing will replace
  it (``health.repair: drain-only``, PCS only);
- ``failed``: down or not responding, not by the loop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from provisioner.catalog.faults import OWN_RULES, repair_budget

#: The prefix of every reason and Comment the agent writes.
AGENT = "fmctl-health:"
#: clustermgtd's reason for a static node it replaces (clustermgtd.py at 2e8f9a8).
CLUSTERMGTD_REPLACING = "Static node maintenance"
STATES = ("healthy", "suspect", "draining", "repairing", "verifying", "drained", "failed")
#: sinfo's state suffixes (sinfo(1), NODE STATE CODES): not responding, powered down,
#: powering up, pending power down, powering down, maintenance, pending reboot, reboot
#: issued, planned.
_SUFFIXES = "*~#!%$@^-"
_XID = re.compile(r"XID (\d+) (\S+) -> (\S+)")
_OWN = re.compile(r"(\S+) \((.*)\) -> (\S+)")


@dataclass(frozen=True)
class Fault:
    """A fault as the agent wrote it: code (``xid:79``, ``efa-count``), class, action."""

    code: str
    fault_class: str
    action: str
    detail: str

    def as_data(self) -> dict[str, str]:
        """JSON-able form."""
        return {
            "code": self.code,
            "class": self.fault_class,
            "action": self.action,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class NodeHealth:
    """One node: its state in the loop, its last fault, since when (None: no record)."""

    name: str
    pool: str
    state: str
    fault: Fault | None = None
    since: str | None = None
    detail: str = ""

    def as_data(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "name": self.name,
            "pool": self.pool,
            "state": self.state,
            "fault": self.fault.as_data() if self.fault else None,
            "since": self.since,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class PoolHealth:
    """A pool's nodes in repair by the agent, against its budget (health.maxInRepair)."""

    name: str
    nodes: int
    in_repair: int
    budget: int

    def as_data(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "name": self.name,
            "nodes": self.nodes,
            "inRepair": self.in_repair,
            "budget": self.budget,
        }


@dataclass(frozen=True)
class HealthEvent:
    """A node leaving service: when, which, why (the reason as the scheduler keeps it)."""

    time: str
    node: str
    pool: str
    what: str

    def as_data(self) -> dict[str, str]:
        """JSON-able form."""
        return {"time": self.time, "node": self.node, "pool": self.pool, "what": self.what}


@dataclass(frozen=True)
class HealthReport:
    """The whole cluster."""

    cluster: str
    scheduler: str
    pools: tuple[PoolHealth, ...] = ()
    nodes: tuple[NodeHealth, ...] = ()
    events: tuple[HealthEvent, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def as_data(self) -> dict[str, Any]:
        """JSON-able form (`fmctl health -o json`)."""
        return {
            "cluster": self.cluster,
            "scheduler": self.scheduler,
            "pools": [p.as_data() for p in self.pools],
            "nodes": [n.as_data() for n in self.nodes],
            "events": [e.as_data() for e in self.events],
            "notes": list(self.notes),
        }


def parse_fault(reason: str) -> Fault | None:
    """The fault in one of the agent's reasons or Comments, or None (someone else's)."""
    if not reason.startswith(AGENT):
        return None
    body = reason[len(AGENT) :].strip().removeprefix("held ").strip()
    xid = _XID.search(body)
    if xid:
        return Fault(f"xid:{xid.group(1)}", xid.group(2), xid.group(3), body)
    own = _OWN.match(body)
    if own:
        code = next((r.code for r in OWN_RULES if r.fault_class == own.group(1)), own.group(1))
        return Fault(code, own.group(1), own.group(3), own.group(2))
    return None


def natural(name: str) -> tuple[tuple[int, int | str], ...]:
    """A sort key that puts train-st-p5-2 before train-st-p5-10."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name) if part
    )


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed node names (``gpu-st-p5-[1-3,7],login1``) one by one."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", text):
        match = re.fullmatch(r"(.*?)\[([^\]]*)\](.*)", part)
        if not match:
            names.append(part)
            continue
        prefix, spans, rest = match.groups()
        tails = expand_hostlist(rest) if rest else [""]
        for span in spans.split(","):
            low, _, high = span.partition("-")
            width = len(low)
            for n in range(int(low), int(high or low) + 1):
                names.extend(f"{prefix}{n:0{width}d}{tail}" for tail in tails)
    return names


def _out_of_service(state: str) -> bool:
    """Whether sinfo's state is one a reason goes with: drained, down, failing, rebooting."""
    base = state.rstrip(_SUFFIXES).lower()
    return base.startswith(("drain", "down", "fail", "reboot")) or state.endswith("@")


#: What a node the agent drained with ``-> drain`` waits for (the state's detail).
FOR_A_PERSON = "health.repair drain-only: out of service until a person acts"


def _slurm_state(state: str, reason: str, held: str | None) -> tuple[str, str]:
    """(fmctl's state, a detail) of one node from sinfo's long state and its reason."""
    base = state.rstrip(_SUFFIXES).lower()
    ours = reason.startswith(AGENT)
    if ours and "verifying" in reason:
        return "verifying", state
    if ours:
        if base == "draining":
            return "draining", state
        if reason.rsplit("-> ", 1)[-1].strip() == "drain":
            return "drained", f"{reason} ({FOR_A_PERSON})"
        return "repairing", state
    if reason.startswith(CLUSTERMGTD_REPLACING) or base.startswith("reboot") or "@" in state:
        return "repairing", state
    if base in ("drained", "draining"):
        return "drained", state
    if state.endswith("*"):
        return "failed", f"{state}: not responding to slurmctld"
    if base in ("down", "fail", "failing", "unknown", "inval"):
        return "failed", state
    if held:
        return "suspect", state
    return "healthy", "powered down" if state.endswith("~") else state


def _sections(
    text: str,
) -> tuple[list[tuple[str, str, str, str, str]], dict[str, str], set[str]]:
    """cluster-health.sh's sections: sinfo's groups (partition without the default's ``*``,
    state, reason time, hosts, reason), the held faults by node, and the nodes the verify
    gate holds for their NCCL pair."""
    section = ""
    groups: list[tuple[str, str, str, str, str]] = []
    held: dict[str, str] = {}
    verifying: set[str] = set()
    for line in text.splitlines():
        if line.startswith("== "):
            section = line[3:].strip()
            continue
        if section == "nodes" and line.count("|") >= 4:
            partition, state, when, hosts, reason = line.split("|", 4)
            groups.append((partition.rstrip("*"), state, when, hosts, reason.strip()))
        elif section == "held" and "|" in line:
            node, _, note = line.partition("|")
            held[node] = note.strip()
        elif section == "verifying" and line.strip():
            verifying.add(line.strip())
    return groups, held, verifying


def parse_slurm(
    cluster: str,
    text: str,
    max_in_repair: str,
    pools: tuple[str, ...] = (),
) -> HealthReport:
    """cluster-health.sh's output -> the report. ``pools``: the spec's GPU pools (only their
    nodes count; the head node's partitions, if any, are left out). A node the agent
    drained for a repair is ``repairing`` once idle on both Slurm providers:
    ParallelCluster's clustermgtd replaces it (its ``terminate_drain_nodes``), and on PCS
    the agent reboots it into the nodeBootstrapped stage that fails for it
    (slurm/lib/health-agent.sh)."""
    groups, held, verifying = _sections(text)
    nodes: list[NodeHealth] = []
    events: list[HealthEvent] = []
    seen: set[tuple[str, str]] = set()
    for partition, state, when, hosts, reason in groups:
        if pools and partition not in pools:
            continue
        # Slurm keeps the reason of a node resumed while it did not respond: only an
        # out-of-service node's reason is current.
        if reason in ("none", "(null)") or not _out_of_service(state):
            reason = ""
        since: str | None = None if when in ("Unknown", "", "None") else when
        for name in expand_hostlist(hosts):
            if (partition, name) in seen:
                continue
            seen.add((partition, name))
            comment = held.get(name)
            status, detail = _slurm_state(state, reason, comment)
            if name in verifying and not reason:
                # Reserved to root until its 2-node NCCL pair passes (verify-pair.sh).
                status = "verifying"
                comment = f"{AGENT} held for its 2-node NCCL pair (fmctl-verify-{name})"
            fault = parse_fault(reason) or (parse_fault(comment) if comment else None)
            if reason:
                detail = detail if status == "drained" and reason.startswith(AGENT) else reason
                if since:
                    events.append(HealthEvent(since, name, partition, reason))
            elif comment:
                detail = comment
            nodes.append(
                NodeHealth(name, partition, status, fault, since if reason else None, detail)
            )
    return HealthReport(
        cluster,
        "slurm",
        pools=_pools(nodes, max_in_repair),
        nodes=tuple(sorted(nodes, key=lambda n: (n.pool, natural(n.name)))),
        events=tuple(sorted(events, key=lambda e: e.time, reverse=True)),
    )


def _pools(nodes: list[NodeHealth], max_in_repair: str) -> tuple[PoolHealth, ...]:
    out = []
    for pool in sorted({n.pool for n in nodes}):
        members = [n for n in nodes if n.pool == pool]
        repairing = sum(
            1
            for n in members
            if n.state in ("draining", "repairing", "verifying", "drained")
            and n.detail.startswith(AGENT)
        )
        out.append(
            PoolHealth(pool, len(members), repairing, repair_budget(max_in_repair, len(members)))
        )
    return tuple(out)


#: sinfo's base states of a node that runs no job (sinfo(1), NODE STATE CODES): IDLE (not
#: allocated to any job), DRAINED (unavailable, no job), RESERVED (in an advance
#: reservation), MAINT (in a maintenance reservation: a Capacity Block's wind-down holds its
#: nodes so) and FAIL (taken out, no job; FAILING still runs one).
_NO_JOB = ("idle", "drained", "reserved", "maint", "fail")


@dataclass(frozen=True)
class SlurmUse:
    """The nodes of some partitions that run on an instance now, (name, partition) each,
    and those of them that run no job (`fmctl cost`'s idle share on Slurm)."""

    nodes: tuple[tuple[str, str], ...]
    idle: tuple[str, ...]


def slurm_use(text: str, partitions: tuple[str, ...]) -> SlurmUse:
    """cluster-health.sh's output -> the nodes of ``partitions`` that run, and the idle
    ones (a node in two partitions counts once, in the first listed). A node the verify
    gate holds for its NCCL pair is idle though the pair's job runs on it: it takes no work
    of the user's until it has passed (as on Kubernetes, where it carries the startup taint:
    ``ops.cost_report.kube_idle``)."""
    nodes, idle = dict[str, str](), set[str]()
    groups, _, verifying = _sections(text)
    for partition, state, _, hosts, _ in groups:
        base = state.rstrip(_SUFFIXES).lower()
        # Powered off (``~``) or DOWN (ParallelCluster and PCS replace its instance): no
        # instance of the node bills now.
        if partition not in partitions or "~" in state or base == "down":
            continue
        for name in expand_hostlist(hosts):
            nodes.setdefault(name, partition)
            if base in _NO_JOB or name in verifying:
                idle.add(name)
    ordered = sorted(nodes.items(), key=lambda item: natural(item[0]))
    return SlurmUse(tuple(ordered), tuple(n for n, _ in ordered if n in idle))
