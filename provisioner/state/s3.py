"""The S3 backend: a team's shared state under ``s3://BUCKET/PREFIX/CLUSTER/``.

Every replacing write is compare-and-swap on the object's ETag (``If-Match``, or
``If-None-Match: *`` for an object that did not exist), so a run can never overwrite what
another run wrote since it read it. Per-run objects (an event log, an audit entry) have keys
of their own and need no condition. S3 evaluates these conditions atomically: of two
concurrent conditional writes one gets 412 PreconditionFailed or 409
ConditionalRequestConflict (https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from provisioner.drivers.aws_errors import BucketNotFound, KeyNotFound
from provisioner.state.backend import LockView, Stored
from provisioner.state.errors import StateConflict, StateError
from provisioner.state.lease import NOT_AS_SEEN, Lease, acquire, view
from provisioner.state.location import StateLocation
from provisioner.state.records import Holder

_UNSEEN = "?"


class S3Backend:
    """One cluster's objects and lock in a bucket."""

    def __init__(self, client: Any, location: StateLocation, cluster: str) -> None:
        assert location.bucket is not None
        self.client = client
        self.bucket = location.bucket
        self.location = location
        self.cluster = cluster
        self._versions: dict[str, str | None] = {}

    @property
    def where(self) -> str:
        """``s3://BUCKET/PREFIX/CLUSTER``."""
        return f"{self.location.url}/{self.cluster}"

    def key(self, name: str) -> str:
        """The object key of ``name``."""
        return self.location.key(self.cluster, name)

    def _no_bucket(self) -> StateError:
        """The bucket does not exist: what to run instead."""
        return StateError(
            f"the state bucket {self.bucket} does not exist",
            f"create it with `fmctl state init {self.location.url}` (or fix the name)",
        )

    def read(self, name: str) -> Stored | None:
        """GetObject; remembers its ETag for the next write."""
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=self.key(name))
        except BucketNotFound:
            raise self._no_bucket() from None
        except KeyNotFound:
            self._versions[name] = None
            return None
        text = answer["Body"].read().decode()
        self._versions[name] = answer["ETag"]
        return Stored(text, answer["ETag"])

    def _head(self, name: str) -> str | None:
        try:
            return str(self.client.head_object(Bucket=self.bucket, Key=self.key(name))["ETag"])
        except KeyNotFound:
            return None

    def remember(self, names: tuple[str, ...]) -> None:
        """HeadObject each: the versions later writes must still find."""
        for name in names:
            self._versions[name] = self._head(name)

    def write(self, name: str, text: str) -> None:
        """PutObject on the condition that the object is as this run last saw it."""
        seen = self._versions.get(name, _UNSEEN)
        if seen == _UNSEEN:
            seen = self._head(name)
        condition = {"IfMatch": seen} if seen else {"IfNoneMatch": "*"}
        try:
            answer = self.client.put_object(
                Bucket=self.bucket, Key=self.key(name), Body=text.encode(), **condition
            )
        except NOT_AS_SEEN:
            raise StateConflict(
                f"{self.where}/{name} changed since this run read it: another run wrote it",
                f"nothing more was written; `fmctl history {self.cluster}` shows the "
                "runs; run the command again to work from the state as it is now",
            ) from None
        self._versions[name] = answer["ETag"]

    def guard(self, fence: Callable[[], None]) -> None:
        """Run ``fence`` as each state write is sent (botocore's ``before-send``, every
        attempt), not only before it is built: a run paused between its check and its call
        (SIGSTOP, a long GC pause) must not write once its lease has ended. The lock's own
        writes are the lease's business (``state.lease``) and pass."""
        from urllib.parse import unquote, urlsplit

        lock = f"/{self.key('lock.json')}"  # path-style or virtual-hosted, the key ends it

        def check(request: Any, **_: Any) -> None:
            if not unquote(urlsplit(request.url).path).endswith(lock):
                fence()

        for operation in ("PutObject", "DeleteObject"):
            self.client.meta.events.register(f"before-send.s3.{operation}", check)

    def add(self, name: str, text: str) -> None:
        """PutObject of an object only this run writes."""
        self.client.put_object(Bucket=self.bucket, Key=self.key(name), Body=text.encode())

    def names(self, prefix: str) -> list[str]:
        """ListObjectsV2 under ``prefix``, every page."""
        base = self.key("")
        found: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.key(prefix)
        ):
            found += [item["Key"][len(base) :] for item in page.get("Contents", [])]
        return sorted(found)

    def lock(self, holder: Holder, wait: bool, notice: Callable[[str], None]) -> Lease:
        """A leased lock on ``lock.json`` (see ``state.lease``)."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except BucketNotFound:
            raise self._no_bucket() from None
        return acquire(
            self.client, self.bucket, self.key("lock.json"), self.cluster, holder, wait, notice
        )

    def peek(self) -> LockView | None:
        """GetObject of the lock: its holder and what remains of its lease, by S3's clock."""
        return view(self.client, self.bucket, self.key("lock.json"))

    def break_lock(self, seen: LockView) -> bool:
        """DeleteObject ``If-Match`` the lock seen: a lock renewed or taken since stays."""
        try:
            self.client.delete_object(
                Bucket=self.bucket, Key=self.key("lock.json"), IfMatch=seen.version
            )
        except NOT_AS_SEEN:
            return False
        return True
