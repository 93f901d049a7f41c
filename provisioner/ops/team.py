"""Where a cluster's state lives, and the use cases of a shared one: `fmctl state init`,
`state push` / `pull`, `unlock`, `history`; and the holder a run's lock names.

A cluster's state location, first match wins: the spec's ``state`` (with ``--state`` /
FMCTL_STATE, when given, required to agree), else ``--state`` / FMCTL_STATE, else the
location this machine last used for the cluster, else this machine's folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import time
import uuid
from dataclasses import dataclass

from provisioner.ops.target import Target
from provisioner.resources.storage import (
    PUBLIC_ACCESS_BLOCK,
    default_encryption,
    tls_only_policy,
)
from provisioner.spec.model import ClusterSpec
from provisioner.state.errors import StateError
from provisioner.state.lease import lease_seconds
from provisioner.state.local import write_private
from provisioner.state.location import LOCAL, StateLocation, parse_state_url
from provisioner.state.records import AuditEntry, Holder
from provisioner.state.s3 import S3Backend
from provisioner.state.store import REPLACED, ClusterState

__all__ = [
    "StateLocation",
    "history",
    "holder",
    "init_bucket",
    "location_of",
    "note_location",
    "open_state",
    "parse_state_url",
    "pull",
    "push",
]

#: This machine's note of where a cluster's state lives (beside its local folder).
POINTER = "state-location"


def spec_location(spec: ClusterSpec) -> StateLocation | None:
    """The spec's ``state``, or None when it says nothing (local by default)."""
    if spec.state.backend == "s3" and spec.state.bucket:
        return StateLocation(spec.state.bucket, spec.state.prefix)
    return None


def location_of(target: Target, name: str, spec: ClusterSpec | None = None) -> StateLocation:
    """See the module's docstring; StateError when the spec and --state disagree."""
    from_spec = spec_location(spec) if spec is not None else None
    if from_spec is not None and target.state is not None and target.state != from_spec:
        raise StateError(
            f"the spec keeps {name}'s state in {from_spec.url}, but --state/FMCTL_STATE says "
            f"{target.state.url}",
            "drop one of them (two places would mean two locks)",
        )
    if from_spec is not None:
        return from_spec
    if target.state is not None:
        return target.state
    try:
        return parse_state_url((target.folder(name) / POINTER).read_text().strip())
    except (OSError, ValueError):
        return LOCAL


#: The S3 endpoint team state is reached through when no region is known (see state_at).
STATE_ENDPOINT_REGION = "us-east-1"


def open_state(target: Target, name: str, spec: ClusterSpec | None = None) -> ClusterState:
    """The cluster's state, where it lives (see ``location_of``)."""
    location = location_of(target, name, spec)
    return state_at(target, name, location)


def state_at(target: Target, name: str, location: StateLocation) -> ClusterState:
    """The cluster's state at ``location`` (reads nothing yet)."""
    if location.local:
        return ClusterState(target.home, name)
    from provisioner.ops.region import Unresolved

    if isinstance(target.region, Unresolved):
        # The state bucket, not the cluster: S3 finds a bucket from any region's endpoint
        # (botocore follows S3's redirect to the bucket's own), so `history`, `unlock` and
        # `state pull` need no region; a command that reaches the cluster still says how
        # to give one.
        target = dataclasses.replace(target, region=STATE_ENDPOINT_REGION)
    # Its own clients: the backend hooks its fence into them (``S3Backend.guard``).
    backend = S3Backend(target.aws(own=True).client("s3"), location, name)
    return ClusterState(target.home, name, backend)


def note_location(target: Target, state: ClusterState) -> None:
    """Remember on this machine where a cluster's shared state is (for `down NAME`, `status
    NAME` and the rest, which have no spec to say it)."""
    pointer = target.folder(state.name) / POINTER
    if state.shared:
        write_private(pointer, state.backend.where.rsplit("/", 1)[0] + "\n")
    else:
        pointer.unlink(missing_ok=True)


def holder(target: Target, command: str, spec_text: str = "") -> Holder:
    """This run, as its lock and audit entries name it (the caller's ARN from STS)."""
    try:
        who = str(target.aws().client("sts").get_caller_identity()["Arn"])
    except Exception:  # no identity to be had (offline tests): say so rather than guess
        who = "unknown caller"
    return Holder(
        run=uuid.uuid4().hex[:12],
        who=who,
        host=socket.gethostname(),
        pid=os.getpid(),
        command=command,
        spec=hashlib.sha256(spec_text.encode()).hexdigest()[:16] if spec_text else "",
        since=time.time(),
        lease_s=lease_seconds(),
    )


@dataclass(frozen=True)
class BucketReport:
    """What `fmctl state init` found and set, a line each."""

    location: StateLocation
    lines: tuple[str, ...]


def init_bucket(target: Target, location: StateLocation) -> BucketReport:
    """Create (or bring up to standard) the state bucket: versioned, encrypted (SSE-S3,
    bucket keys), public access blocked, TLS-only, noncurrent versions kept 30 days.
    Idempotent: run again, it changes only what differs."""
    from provisioner.drivers.aws import error_code

    assert location.bucket is not None
    s3 = target.aws().client("s3")
    bucket = location.bucket
    lines: list[str] = []
    try:
        s3.head_bucket(Bucket=bucket)
        lines.append(f"bucket {bucket} exists")
    except Exception as exc:
        if error_code(exc) not in {"404", "NoSuchBucket", "NotFound"}:
            raise
        extra = (
            {}
            if target.region == "us-east-1"
            else {"CreateBucketConfiguration": {"LocationConstraint": target.region}}
        )
        s3.create_bucket(Bucket=bucket, ObjectOwnership="BucketOwnerEnforced", **extra)
        lines.append(f"created bucket {bucket} in {target.region}")
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_encryption(
        Bucket=bucket, ServerSideEncryptionConfiguration=default_encryption("AES256")
    )
    s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration=PUBLIC_ACCESS_BLOCK)
    s3.put_bucket_policy(Bucket=bucket, Policy=tls_only_policy(bucket))
    s3.put_bucket_lifecycle_configuration(
        Bucket=bucket,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": "fmctl-state-old-versions",
                    "Status": "Enabled",
                    "Filter": {"Prefix": f"{location.prefix}/"},
                    # Every lease renewal is a version of the lock: keep a month of history.
                    "NoncurrentVersionExpiration": {"NoncurrentDays": 30},
                    "Expiration": {"ExpiredObjectDeleteMarker": True},
                }
            ]
        },
    )
    lines += [
        "versioning on; default encryption SSE-S3 with bucket keys",
        "public access blocked; policy denies requests without TLS",
        f"old versions under {location.prefix}/ expire after 30 days",
        f"use it: `state: {{backend: s3, bucket: {bucket}, prefix: {location.prefix}}}` "
        f"in the spec, or FMCTL_STATE={location.url}",
    ]
    return BucketReport(location, tuple(lines))


def move(target: Target, name: str, source: ClusterState, dest: ClusterState) -> list[str]:
    """Copy a cluster's state from ``source`` to ``dest`` under both locks; the names
    copied. Refuses (StateConflict) to overwrite a destination that already has a spec."""
    if dest.spec_text() is not None:
        raise StateError(
            f"{dest.backend.where} already holds a state of {name}",
            "nothing was copied; remove it there first if it is the stale one",
        )
    me = holder(target, "state move")
    source.lock(me)
    try:
        dest.lock(me)
        try:
            copied = []
            # The objects a run replaces; the event and audit logs stay where they were made.
            for obj in REPLACED:
                stored = source.backend.read(obj)
                if stored is not None:
                    dest.fence()
                    dest.backend.write(obj, stored.text)
                    copied.append(obj)
            return copied
        finally:
            dest.unlock()
    finally:
        source.unlock()


def push(target: Target, name: str, location: StateLocation) -> list[str]:
    """`fmctl state push NAME`: this machine's state of ``name`` into ``location``."""
    local = ClusterState(target.home, name)
    if local.spec_text() is None:
        raise StateError(f"there is no local state of {name} in {local.folder}")
    copied = move(target, name, local, state_at(target, name, location))
    for obj in copied:  # moved, not copied: one truth, and a later push finds nothing
        (local.folder / obj).unlink(missing_ok=True)
    write_private(target.folder(name) / POINTER, location.url + "\n")
    return copied


def pull(target: Target, name: str, location: StateLocation) -> list[str]:
    """`fmctl state pull NAME`: ``location``'s state of ``name`` onto this machine (which
    then uses its own folder for it again)."""
    shared = state_at(target, name, location)
    if shared.spec_text() is None:
        raise StateError(f"{shared.backend.where} holds no state of {name}")
    copied = move(target, name, shared, ClusterState(target.home, name))
    (target.folder(name) / POINTER).unlink(missing_ok=True)
    return copied


def history(target: Target, name: str) -> list[AuditEntry]:
    """`fmctl history NAME`: every recorded run, oldest first (reads only)."""
    return open_state(target, name).history()


def applied_spec(target: Target, name: str) -> ClusterSpec | None:
    """The spec `up` last applied to ``name`` (local or team state), or None."""
    from provisioner.spec.source import parse_source
    from provisioner.validate import validate_document

    text = open_state(target, name).spec_text()
    return validate_document(parse_source(text)[0]).resolved if text else None
