"""What resource kinds work with: AWS clients, the cluster's identity and tags, outputs of
done nodes, paced polling, and the event stream the progress view and the state log read."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from provisioner.drivers.aws import Aws

OWNER_TAG = "fmctl.dev/cluster"
RESOURCE_TAG = "fmctl.dev/resource"
EXPIRES_TAG = "fmctl.dev/expires-at"
CREATED_TAG = "fmctl.dev/created-at"


class WaitTimeout(Exception):
    """A wait ran out of time; the message says what it waited for."""


@dataclass
class Event:
    """Something that happened to a resource."""

    resource: str
    state: str  # planned|exists|creating|waiting|updating|note|ready|deleting|deleted|failed
    detail: str = ""
    at: float = field(default_factory=time.monotonic)


#: The pause between looks where a resource most likely finishes, in real seconds (before
#: the sandbox's scaling): a sixteenth of its expected time, within these bounds. Overruns
#: are looked at every tenth, at most MAX_LATE. No pause is shorter than MIN_POLL once scaled.
DENSE_MIN, DENSE_MAX, MAX_LATE, MIN_POLL = 5.0, 15.0, 30.0, 0.05


def poll_schedule(expected: float, scale: float = 1.0) -> Iterator[float]:
    """When to look at a resource AWS documents as taking ``expected`` seconds: offsets from
    the start, already multiplied by ``scale`` (the sandbox's clock); endless.

    Once at once (it may exist already) and once at 0.6 of the expected time; densely from
    0.75 to 1.6 times it, where real durations fall; sparsely after. Against boto3's stock
    waiters (a look every 10-30 s from the start), this makes fewer calls for everything
    that takes minutes and notices it sooner (benchmarks/polling.py prints both).
    """
    dense = min(max(expected / 16, DENSE_MIN), DENSE_MAX)
    late = min(max(expected / 10, DENSE_MIN), MAX_LATE)
    last = 0.0
    yield 0.0
    at = 0.6 * expected
    while True:
        at_scaled = max(at * scale, last + MIN_POLL)
        yield at_scaled
        last = at_scaled
        if at < 0.75 * expected:
            at = 0.75 * expected
        else:
            at += dense if at < 1.6 * expected else late


@dataclass
class Engine:
    """Shared by every node of a run."""

    aws: Aws
    cluster: str
    region: str
    tags: dict[str, str]
    spec: Any = None
    #: 1.0 against AWS; the sandbox's scale there, so waits pace themselves to its clock.
    time_scale: float = 1.0
    on_event: Callable[[Event], None] = lambda event: None
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The `pcluster` command, where ParallelCluster is available (Slurm clusters).
    pcluster: list[str] | None = None
    #: `down --skip-kubernetes-cleanup`: do not reach into the cluster's API to clear load
    #: balancers and volumes (the way out when the API cannot be reached from here).
    skip_kubernetes_cleanup: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    poll_calls: dict[str, int] = field(default_factory=dict)

    def emit(self, resource: str, state: str, detail: str = "") -> None:
        """Publish an event."""
        self.on_event(Event(resource, state, detail))

    def tags_for(self, logical_id: str) -> dict[str, str]:
        """Ownership tags plus the spec's tags for one resource."""
        return {**self.tags, OWNER_TAG: self.cluster, RESOURCE_TAG: logical_id}

    def tag_list(
        self, logical_id: str, key: str = "Key", value: str = "Value"
    ) -> list[dict[str, str]]:
        """Tags in the [{"Key": k, "Value": v}] shape most APIs take."""
        return [{key: k, value: v} for k, v in sorted(self.tags_for(logical_id).items())]

    def tag_spec(self, resource_type: str, logical_id: str) -> list[dict[str, Any]]:
        """EC2 TagSpecifications."""
        return [{"ResourceType": resource_type, "Tags": self.tag_list(logical_id)}]

    def owner_filters(self, logical_id: str | None = None) -> list[dict[str, Any]]:
        """EC2 filters selecting the cluster's resources (one of them, with ``logical_id``)."""
        filters = [{"Name": f"tag:{OWNER_TAG}", "Values": [self.cluster]}]
        if logical_id is not None:
            filters.append({"Name": f"tag:{RESOURCE_TAG}", "Values": [logical_id]})
        return filters

    def token(self, logical_id: str) -> str:
        """An idempotency token stable for this cluster and resource (retries and re-runs of
        `up` after a crash return the same resource instead of a second one)."""
        digest = hashlib.sha256(f"{self.cluster}/{logical_id}".encode()).hexdigest()[:32]
        return f"fmctl-{digest}"

    def output(self, logical_id: str, key: str = "id") -> Any:
        """An output of a done node."""
        with self.lock:
            return self.outputs[logical_id][key]

    def wait_until(
        self,
        what: str,
        probe: Callable[[], Any | None],
        expected: float,
        timeout: float,
        resource: str,
    ) -> Any:
        """Poll ``probe`` until it returns something, at the times ``poll_schedule`` gives
        for the expected duration. Raises WaitTimeout naming what it waited for."""
        scale = self.time_scale
        start = time.monotonic()
        deadline = start + timeout * max(scale, 0.01)
        for at in poll_schedule(expected, scale):
            if at > 0 and start + at > deadline:
                raise WaitTimeout(
                    f"gave up after {time.monotonic() - start:.0f}s waiting for {what}"
                )
            time.sleep(max(start + at - time.monotonic(), 0.0))
            result = probe()
            self._count(resource)
            if result is not None:
                return result
        raise AssertionError("poll_schedule never ends")  # pragma: no cover

    def _count(self, resource: str) -> None:
        with self.lock:
            self.poll_calls[resource] = self.poll_calls.get(resource, 0) + 1
