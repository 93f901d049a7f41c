"""What resource kinds work with: AWS clients, the cluster's identity and tags, outputs of
done nodes, paced polling, and the event stream the progress view and the state log read."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
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
        """Poll ``probe`` until it returns something, paced by the expected duration.

        The first look comes at a third of the expected time (nothing is ready sooner), then
        every twentieth of it, bounded to [0.05 s, 30 s] after scaling: an FSx file system
        (10 min) costs about 25 calls and is noticed within 30 s; boto3's stock waiter polls
        it every 30 s from the start. Raises WaitTimeout naming what it waited for.
        """
        scale = self.time_scale
        start = time.monotonic()
        deadline = start + timeout * max(scale, 0.01)
        result = probe()
        self._count(resource)
        delay = min(max(expected * scale / 3, 0.05), 30.0)
        while result is None:
            if time.monotonic() + delay > deadline:
                raise WaitTimeout(
                    f"gave up after {time.monotonic() - start:.0f}s waiting for {what}"
                )
            time.sleep(delay)
            result = probe()
            self._count(resource)
            delay = min(max(expected * scale / 20, 0.05), 30.0)
        return result

    def _count(self, resource: str) -> None:
        with self.lock:
            self.poll_calls[resource] = self.poll_calls.get(resource, 0) + 1
