"""Where a cluster's state lives, and the use cases of a shared one: `fmctl state init`,
`state push` / `pull`, `unlock`, `history`; and the holder a run's lock names.

A cluster's state location, first match wins: the spec's ``state`` (with ``--state`` /
FMCTL_STATE, when given, required to agree), else ``--state`` / FMCTL_STATE, else the
location this machine last used for the cluster, else the one the cluster's own resources
name (``STATE_TAG``), else this machine's folder. Whatever this machine's configuration
says, the resources have the last word: a location that differs from theirs is refused,
so a run anywhere honours the lock a teammate's run holds in the team's bucket.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

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

if TYPE_CHECKING:
    from types_boto3_s3.literals import BucketLocationConstraintType
    from types_boto3_s3.type_defs import CreateBucketRequestTypeDef

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
    "team_region",
]

#: This machine's note of where a cluster's state lives (beside its local folder).
POINTER = "state-location"


def spec_location(spec: ClusterSpec) -> StateLocation | None:
    """The spec's ``state``, or None when it says nothing (local by default)."""
    if spec.state.backend == "s3" and spec.state.bucket:
        return StateLocation(spec.state.bucket, spec.state.prefix)
    return None


def location_of(target: Target, name: str, spec: ClusterSpec | None = None) -> StateLocation:
    """See the module's docstring; StateError when the spec and --state disagree, or when
    the cluster's resources name another location than this machine's configuration."""
    from_spec = spec_location(spec) if spec is not None else None
    if from_spec is not None and target.state is not None and target.state != from_spec:
        raise StateError(
            f"the spec keeps {name}'s state in {from_spec.url}, but --state/FMCTL_STATE says "
            f"{target.state.url}",
            "drop one of them (two places would mean two locks)",
        )
    configured, said = _configured(target, name, from_spec)
    tagged = tagged_location(target, name)
    if tagged is None:
        return configured or LOCAL
    if configured is not None and configured != tagged:
        raise StateError(
            f"{name}'s resources in {target.region} say its state and lock live in "
            f"{tagged.url}, but {said} says {configured.url}",
            f"run with --state {tagged.url} (or FMCTL_STATE), or move the state there with "
            "`fmctl state push`/`pull` first: two places would mean two locks",
        )
    return tagged


def _configured(
    target: Target, name: str, from_spec: StateLocation | None
) -> tuple[StateLocation | None, str]:
    """This machine's word on the location, and who says it; (None, "") when it says
    nothing."""
    if from_spec is not None:
        return from_spec, "the spec's `state`"
    if target.state is not None:
        return target.state, "--state/FMCTL_STATE"
    pointer = target.folder(name) / POINTER
    try:
        return parse_state_url(pointer.read_text().strip()), f"this machine's note {pointer}"
    except (OSError, ValueError):
        return None, ""


#: The EC2 listings the state's place is read from: every cluster has a security group
#: (its EFA group), and a VPC unless it uses one it was given.
_STATE_LISTINGS = (("describe_vpcs", "Vpcs"), ("describe_security_groups", "SecurityGroups"))
#: The kinds `state push` and `pull` mark (the ones those listings show).
_MARKED_KINDS = {"vpc", "sg"}


def tagged_location(target: Target, name: str) -> StateLocation | None:
    """The location the cluster's resources name (``STATE_TAG``), or None: none does (its
    state is some machine's folder, or there is no cluster), or no region is known to look
    in. StateError when they name two."""
    from provisioner.ops.region import Unresolved
    from provisioner.resources.ec2 import tags_of
    from provisioner.resources.tags import OWNER_TAG, STATE_TAG

    if isinstance(target.region, Unresolved):
        return None
    ec2 = target.aws(read_only=True).client("ec2")
    filters = [
        {"Name": f"tag:{OWNER_TAG}", "Values": [name]},
        {"Name": "tag-key", "Values": [STATE_TAG]},
    ]
    urls: set[str] = set()
    for call, key in _STATE_LISTINGS:
        for item in getattr(ec2, call)(Filters=filters)[key]:
            tags = tags_of(item)
            # Checked on the item too: a filter an emulator ignores must not pick another
            # cluster's word.
            if tags.get(OWNER_TAG) == name and tags.get(STATE_TAG):
                urls.add(str(tags.get(STATE_TAG)))
    if len(urls) > 1:
        raise StateError(
            f"{name}'s resources in {target.region} name more than one state location: "
            + ", ".join(sorted(urls)),
            "pick the one that holds the spec and lock (`fmctl history NAME --state URL`), "
            "then `fmctl state push` there again: it marks every resource anew",
        )
    if not urls:
        return None
    try:
        return parse_state_url(urls.pop())
    except ValueError:
        return None


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
    if state.shared_url:
        write_private(pointer, state.shared_url + "\n")
    else:
        pointer.unlink(missing_ok=True)


def holder(target: Target, command: str, spec_text: str = "") -> Holder:
    """This run, as its lock and audit entries name it (the caller's ARN from STS)."""
    try:
        who = str(target.aws().client("sts").get_caller_identity()["Arn"])
    except Exception:  # noqa: BLE001 - no identity to be had (offline tests): say so rather than guess
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


def caller(target: Target) -> str:
    """Who this command runs as, and where (what `unlock` records of itself)."""
    me = holder(target, "unlock")
    return f"{me.who} on {me.host}"


def process_gone(held: Holder) -> bool:
    """True when the holder ran on this machine and its process no longer exists (its run
    is over for certain: nothing of it will renew or write again). False when that cannot
    be told: another machine, or a live pid (perhaps reused)."""
    if held.host != socket.gethostname():
        return False
    try:
        os.kill(held.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    # A zombie (dead, its parent has not reaped it yet) still answers signal 0: proc(5)'s
    # state field says Z.
    try:
        stat = Path(f"/proc/{held.pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]


@dataclass(frozen=True)
class BucketReport:
    """What `fmctl state init` found and set, a line each."""

    location: StateLocation
    lines: tuple[str, ...]


def init_bucket(target: Target, location: StateLocation) -> BucketReport:
    """Create (or bring up to standard) the state bucket: versioned, encrypted (SSE-S3,
    bucket keys), public access blocked, TLS-only, noncurrent versions kept 30 days.
    Idempotent: run again, it changes only what differs."""
    from provisioner.drivers.aws_errors import BucketNotFound

    assert location.bucket is not None
    s3 = target.aws().client("s3")
    bucket = location.bucket
    lines: list[str] = []
    try:
        s3.head_bucket(Bucket=bucket)
        lines.append(f"bucket {bucket} exists")
    except BucketNotFound:
        request: CreateBucketRequestTypeDef = {
            "Bucket": bucket,
            "ObjectOwnership": "BucketOwnerEnforced",
        }
        if target.region != "us-east-1":  # us-east-1 refuses its own name as a constraint
            request["CreateBucketConfiguration"] = {
                "LocationConstraint": cast("BucketLocationConstraintType", target.region)
            }
        s3.create_bucket(**request)
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
            # The objects a run replaces, compared and swapped.
            for obj in REPLACED:
                stored = source.backend.read(obj)
                if stored is not None:
                    dest.fence()
                    dest.backend.write(obj, stored.text)
                    copied.append(obj)
            # The history goes with them: each run's audit entry and event log (objects of
            # their own, which no other run writes).
            logs = source.backend.names("audit/") + source.backend.names("events/")
            for obj in logs:
                stored = source.backend.read(obj)
                if stored is not None:
                    dest.fence()
                    dest.backend.add(obj, stored.text)
            if logs:
                copied.append(f"{len(logs)} history object(s)")
            return copied
        finally:
            dest.unlock()
    finally:
        source.unlock()


@dataclass(frozen=True)
class Moved:
    """What `state push` or `pull` did: the objects copied, and how many of the cluster's
    resources now name the new location (``STATE_TAG``)."""

    copied: tuple[str, ...]
    marked: int


def push(target: Target, name: str, location: StateLocation) -> Moved:
    """`fmctl state push NAME`: this machine's state of ``name`` into ``location``, and the
    cluster's resources marked with it (so a run from a machine that does not know finds
    the lock there)."""
    local = ClusterState(target.home, name)
    if local.spec_text() is None:
        raise StateError(f"there is no local state of {name} in {local.folder}")
    copied = move(target, name, local, state_at(target, name, location))
    # Moved, not copied: one truth, and a later push finds nothing.
    for obj in REPLACED + tuple(local.backend.names("audit/")):
        (local.folder / obj).unlink(missing_ok=True)
    write_private(target.folder(name) / POINTER, location.url + "\n")
    return Moved(tuple(copied), _mark(target, name, location.url))


def pull(target: Target, name: str, location: StateLocation) -> Moved:
    """`fmctl state pull NAME`: ``location``'s state of ``name`` onto this machine (which
    then uses its own folder for it again), and the resources' mark taken off."""
    shared = state_at(target, name, location)
    if shared.spec_text() is None:
        raise StateError(f"{shared.backend.where} holds no state of {name}")
    copied = move(target, name, shared, ClusterState(target.home, name))
    (target.folder(name) / POINTER).unlink(missing_ok=True)
    return Moved(tuple(copied), _mark(target, name, None))


def _mark(target: Target, name: str, url: str | None) -> int:
    """Tag the cluster's VPC and security groups with ``url`` (None: untag them); how many.
    Nothing without a region to find them in (the state moved all the same)."""
    from provisioner.ops.planner import find_owned
    from provisioner.ops.region import Unresolved
    from provisioner.ops.target import make_context
    from provisioner.resources.tags import STATE_TAG

    if isinstance(target.region, Unresolved):
        return 0
    found = find_owned(make_context(target, name, read_only=True), _MARKED_KINDS)
    ids = sorted(o.id for o in found)
    if not ids:
        return 0
    ec2 = target.aws().client("ec2")
    if url is None:
        ec2.delete_tags(Resources=ids, Tags=[{"Key": STATE_TAG}])
    else:
        ec2.create_tags(Resources=ids, Tags=[{"Key": STATE_TAG, "Value": url}])
    return len(ids)


def history(target: Target, name: str) -> list[AuditEntry]:
    """`fmctl history NAME`: every recorded run, oldest first (reads only)."""
    return open_state(target, name).history()


def applied_spec(target: Target, name: str) -> ClusterSpec | None:
    """The spec `up` last applied to ``name`` (local or team state), or None."""
    from provisioner.spec.source import parse_source
    from provisioner.validate import validate_document

    text = open_state(target, name).spec_text()
    return validate_document(parse_source(text)[0]).resolved if text else None


def team_region(home: Path, name: str, sandbox: bool, state_url: str | None) -> str | None:
    """The region recorded for ``name`` in its shared state: the one ``state_url`` names,
    else the one this machine noted for it. None when the state is not shared, holds no
    record, or cannot be read (the command then says what it lacks, as without it)."""
    from provisioner.ops.target import target_for

    text = state_url or ""
    if not text:
        try:
            text = (home / "clusters" / name / POINTER).read_text().strip()
        except OSError:
            return None
    try:
        location = parse_state_url(text)
        if location.local:
            return None
        # A bucket is reached from any region's endpoint (S3 redirects to its own).
        target = target_for(STATE_ENDPOINT_REGION, home, sandbox)
        return state_at(target, name, location).region()
    except Exception:  # noqa: BLE001 - no record to be had is "not recorded": the command says so later
        return None
