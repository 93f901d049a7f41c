"""What kinds work with during a run: AWS clients, the cluster's identity, the outputs of
resources done so far (by reference), paced waits, per-kind caches of batched reads, and the
event stream the progress view and the state log read."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from provisioner.drivers.aws import Aws
from provisioner.graph.pacing import poll_schedule
from provisioner.graph.ref import UNKNOWN, Ref
from provisioner.resources.errors import WaitTimeout
from provisioner.resources.tags import OWNER_TAG, RESOURCE_TAG, AwsTag, DesiredTags, aws_tags

if TYPE_CHECKING:
    from types_boto3_ec2.literals import ResourceTypeType
    from types_boto3_ec2.type_defs import FilterTypeDef, TagSpecificationTypeDef

T = TypeVar("T")


@dataclass
class Event:
    """Something that happened to a resource."""

    resource: str
    #: planned|exists|creating|waiting|updating|adopted|note|ready|deleting|deleted|failed
    state: str
    detail: str = ""
    at: float = field(default_factory=time.monotonic)
    #: For "waiting": how long the wait is expected to take, in seconds of this run's clock.
    expected: float | None = None


@dataclass(frozen=True)
class DrainSettings:
    """What `up` does to the work on nodes a change takes away (the spec's
    ``compute.drain``)."""

    #: How long to wait for a node's pods or jobs to leave before stopping.
    timeout_s: float
    #: Slurm: "wait" for running jobs, or "requeue" them.
    jobs: str = "wait"


@dataclass
class Context:
    """Shared by every resource of a run (plan, up, down, status)."""

    aws: Aws
    cluster: str
    region: str
    #: 1.0 against AWS; the sandbox's scale there, so waits pace themselves to its clock.
    time_scale: float = 1.0
    on_event: Callable[[Event], None] = lambda event: None
    #: Outputs of the resources done (or read) so far, by logical id.
    outputs: dict[str, Any] = field(default_factory=dict)
    #: The `pcluster` command, where ParallelCluster is available (Slurm clusters).
    pcluster: list[str] | None = None
    #: `down --skip-kubernetes-cleanup`: do not reach into the cluster's API to clear load
    #: balancers and volumes (the way out when the API cannot be reached from here).
    skip_kubernetes_cleanup: bool = False
    #: `down`: the whole cluster goes, and what lives inside its Kubernetes API goes with
    #: it (kinds need not delete such objects one by one).
    teardown: bool = False
    #: `up`: drain the nodes a change takes away first (None: `down`, which takes the whole
    #: cluster, its work with it, as the user was told before it asked).
    drain: DrainSettings | None = None
    #: Raises when this run may no longer change anything (its lease on the cluster's lock
    #: is gone); checked before each step and, through ``aws``, before each write call.
    fence: Callable[[], None] = lambda: None
    lock: threading.Lock = field(default_factory=threading.Lock)
    poll_calls: dict[str, int] = field(default_factory=dict)
    _cache: dict[str, Any] = field(default_factory=dict)
    _cache_locks: dict[str, threading.Lock] = field(default_factory=dict)

    def emit(
        self, resource: str, state: str, detail: str = "", expected: float | None = None
    ) -> None:
        """Publish an event."""
        self.on_event(Event(resource, state, detail, expected=expected))

    # -- references ---------------------------------------------------------------------
    def get(self, ref: Ref[T]) -> T:
        """The outputs ``ref`` points at (its resource must be done or read)."""
        with self.lock:
            value = self.outputs[ref.target]
        if not isinstance(value, ref.outputs):
            raise TypeError(f"{ref.target} has {type(value).__name__}, not {ref.outputs.__name__}")
        return value

    def known(self, ref: Ref[Any]) -> bool:
        """True when ``ref``'s resource is done or was read."""
        with self.lock:
            return ref.target in self.outputs

    def resolve(self, ref: Ref[Any] | None, attribute: str = "id") -> Any:
        """One attribute of what ``ref`` points at, ``UNKNOWN`` when not made yet, None for
        no reference."""
        if ref is None:
            return None
        if not self.known(ref):
            return UNKNOWN
        return getattr(self.get(ref), attribute)

    def record(self, resource: str, outputs: Any) -> None:
        """Keep a resource's outputs for the resources that refer to it."""
        with self.lock:
            self.outputs[resource] = outputs

    # -- ownership ----------------------------------------------------------------------
    def owner_filters(self, resource: str | None = None) -> list[FilterTypeDef]:
        """EC2 filters selecting the cluster's resources (one of them, with ``resource``)."""
        filters: list[FilterTypeDef] = [{"Name": f"tag:{OWNER_TAG}", "Values": [self.cluster]}]
        if resource is not None:
            filters.append({"Name": f"tag:{RESOURCE_TAG}", "Values": [resource]})
        return filters

    def ours(self, tags: dict[str, str] | None) -> bool:
        """True when ``tags`` say the resource is this cluster's."""
        return (tags or {}).get(OWNER_TAG) == self.cluster

    def token(self, resource: str) -> str:
        """An idempotency token stable for this cluster and resource (retries and re-runs
        after a crash return the same resource instead of a second one)."""
        digest = hashlib.sha256(f"{self.cluster}/{resource}".encode()).hexdigest()[:32]
        return f"fmctl-{digest}"

    @staticmethod
    def tag_list(tags: DesiredTags) -> list[AwsTag]:
        """Creation tags in the [{"Key": k, "Value": v}] shape most APIs take."""
        return aws_tags(tags.at_creation())

    @staticmethod
    def tag_spec(
        resource_type: ResourceTypeType, tags: DesiredTags
    ) -> list[TagSpecificationTypeDef]:
        """EC2 TagSpecifications with the creation tags."""
        pairs = sorted(tags.at_creation().items())
        return [{"ResourceType": resource_type, "Tags": [{"Key": k, "Value": v} for k, v in pairs]}]

    # -- batched reads ------------------------------------------------------------------
    def cached(self, key: str, load: Callable[[], T]) -> T:
        """``load()`` once per run and key (a kind's one batched describe serves all its
        resources); concurrent callers wait for the first."""
        with self.lock:
            if key in self._cache:
                return self._cache[key]  # type: ignore[no-any-return]
            gate = self._cache_locks.setdefault(key, threading.Lock())
        with gate:
            with self.lock:
                if key in self._cache:
                    return self._cache[key]  # type: ignore[no-any-return]
            value = load()
            with self.lock:
                self._cache[key] = value
            return value

    def forget(self, key: str) -> None:
        """Drop a cached read (after a write that changes it)."""
        with self.lock:
            self._cache.pop(key, None)

    # -- waiting ------------------------------------------------------------------------
    def wait_until(
        self,
        what: str,
        probe: Callable[[], T | None],
        expected: float,
        timeout: float,
        resource: str,
    ) -> T:
        """Poll ``probe`` until it returns something, at the times ``poll_schedule`` gives
        for the expected duration. Raises WaitTimeout naming what it waited for."""
        scale = self.time_scale
        start = time.monotonic()
        deadline = start + timeout * max(scale, 0.01)
        # Said once; the progress view shows elapsed against it while the wait lasts.
        self.emit(resource, "waiting", what, expected=expected * scale)
        for at in poll_schedule(expected, scale):
            if at > 0 and start + at > deadline:
                raise WaitTimeout(
                    f"gave up after {time.monotonic() - start:.0f}s waiting for {what}"
                )
            time.sleep(max(start + at - time.monotonic(), 0.0))
            result = probe()
            with self.lock:
                self.poll_calls[resource] = self.poll_calls.get(resource, 0) + 1
            if result is not None:
                return result
        raise AssertionError("poll_schedule never ends")  # pragma: no cover
