"""A leased lock on one S3 object, with no other service (no DynamoDB).

- **Acquire**: PutObject ``If-None-Match: *``: of concurrent runs exactly one creates it.
- **Renew**: every quarter lease, PutObject ``If-Match`` its own ETag (a thread of its own).
- **Expire**: a lock whose lease ended by S3's own clock (its Date header against the
  object's LastModified: no comparison of two machines' clocks) is taken over with
  PutObject ``If-Match`` the expired lock's ETag, so two runs cannot both take it.
- **Fence**: the holder counts its lease from when it *sent* its last successful renewal
  (S3 stamps LastModified later), less a second for S3's one-second timestamps and a tenth
  for slack. Past that, before its next change, it renews once more (``fence``): that
  If-Match write lands only if no run took the lock over (a takeover is the same
  conditional write on the same ETag, so only one of them can land), and then the run goes
  on, as a run starved of CPU or of S3's answers whose renewals came late must. Once a
  renewal finds the lock changed, every change stops for good: a run paused past its lease
  (SIGSTOP, a laptop asleep) while another took over writes nothing after.
- **Release**: DeleteObject ``If-Match`` its ETag: a lock taken over is left to its new
  holder.

The lease is FMCTL_LOCK_LEASE seconds (default 120: renewed every 30 s).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from typing import Any

from provisioner.drivers.aws_errors import ConditionFailed, KeyNotFound
from provisioner.state.backend import LockView
from provisioner.state.errors import LeaseLost, LockHeld
from provisioner.state.records import Holder, stamp

DEFAULT_LEASE_S = 120.0
#: How often a waiting run says it still waits.
WAIT_NOTICE_S = 30.0
#: What S3 answers when a condition fails or another conditional write to the key is in
#: flight (ConditionFailed), or the object is gone (KeyNotFound): the lock is not as seen.
NOT_AS_SEEN = (ConditionFailed, KeyNotFound)


def lease_seconds() -> float:
    """FMCTL_LOCK_LEASE, else 120 s (at least 2 s)."""
    try:
        return max(2.0, float(os.environ.get("FMCTL_LOCK_LEASE") or DEFAULT_LEASE_S))
    except ValueError:
        return DEFAULT_LEASE_S


def _safe_for(lease_s: float) -> float:
    """How long after sending a renewal the holder may still act."""
    return lease_s - 1.0 - lease_s / 10


def server_now(response: dict[str, Any]) -> float:
    """The time by S3's clock (its Date header), else this machine's."""
    date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    try:
        return parsedate_to_datetime(date).timestamp() if date else time.time()
    except (TypeError, ValueError):
        return time.time()


def view(client: Any, bucket: str, key: str) -> LockView | None:
    """The lock now, with its lease's remaining seconds by S3's clock; None when free."""
    try:
        answer = client.get_object(Bucket=bucket, Key=key)
    except KeyNotFound:
        return None
    holder = Holder.parse(answer["Body"].read().decode())
    lease = holder.lease_s if holder else DEFAULT_LEASE_S
    remaining = answer["LastModified"].timestamp() + lease - server_now(answer)
    return LockView(holder, remaining, answer["ETag"])


class Lease:
    """A held lock, renewed by a thread until released or lost."""

    def __init__(
        self,
        client: Any,
        bucket: str,
        key: str,
        holder: Holder,
        etag: str,
        sent: float,
        took_over: Holder | None,
    ) -> None:
        self.client, self.bucket, self.key, self.holder = client, bucket, key, holder
        self.took_over = took_over
        self._etag = etag
        self._safe_until = sent + _safe_for(holder.lease_s)
        self._lost = False
        self._released = False
        self._stop = threading.Event()
        self._guard = threading.Lock()
        self._renewing = threading.Lock()
        #: Called after each renewal (the state flushes its event log then).
        self.on_renew: Callable[[], None] = lambda: None
        self._thread = threading.Thread(target=self._renew_loop, name="fmctl-lease", daemon=True)
        self._thread.start()

    @property
    def lost(self) -> bool:
        """True once the lock may be someone else's: taken over, removed or released, or
        past its safe part with no renewal landed since (``fence`` renews then)."""
        with self._guard:
            return self._lost or time.monotonic() > self._safe_until

    def fence(self) -> None:
        """Raise LeaseLost unless the lease surely still runs; past its safe part, renew it
        first (that lands only while the lock is still this run's)."""
        if self._released:
            raise LeaseLost(
                "this run released the cluster's lock: it makes no more changes",
                "run the command again to finish what it did not",
            )
        if self.lost:
            self._renew()
        if self.lost:
            raise LeaseLost(
                f"this run's lease on the lock ended (last renewed more than "
                f"{_safe_for(self.holder.lease_s):.0f} s ago, and renewing it now did not "
                "land): another run may hold it now, so this one stops before its next change",
                "see `fmctl history` for who holds it; run the command again once it is free",
            )

    def _renew(self) -> bool:
        """One renewal, PutObject If-Match this run's ETag; True when it landed. One at a
        time (the thread's and the fence's): two with the same ETag would fail each other.
        Late is safe: if another run took the lock over, the ETag no longer matches."""
        with self._renewing:
            with self._guard:
                if self._lost:
                    return False
                etag = self._etag
            sent = time.monotonic()
            try:
                answer = self.client.put_object(
                    Bucket=self.bucket,
                    Key=self.key,
                    Body=self.holder.body(time.time()).encode(),
                    IfMatch=etag,
                )
            except Exception as exc:  # noqa: BLE001 - a lost lease is told apart below; the rest is transient
                if isinstance(exc, NOT_AS_SEEN):
                    with self._guard:
                        self._lost = True  # taken over (or removed by `unlock --force`)
                return False  # else transient: the next tick or fence tries again
            with self._guard:
                self._etag = answer["ETag"]
                self._safe_until = sent + _safe_for(self.holder.lease_s)
            return True

    def _renew_loop(self) -> None:
        # Renewals go on past the safe part too: one that lands late still holds the lock.
        while not self._stop.wait(self.holder.lease_s / 4):
            if self._renew():
                self.on_renew()
            elif self._lost:
                return

    def release(self) -> None:
        """Stop renewing; delete the lock if it is still this run's. From here on the
        fence refuses every change: threads of a run stopped by Ctrl-C may still be going."""
        self._stop.set()
        self._thread.join(timeout=5)
        self._released = True
        with self._renewing, self._guard:
            was_lost, self._lost = self._lost, True
        if was_lost:
            return  # taken over or removed; one merely past its safe part is deleted if
            # it is still this run's (If-Match), not left for the next run to wait out
        with contextlib.suppress(*NOT_AS_SEEN):  # taken over or removed since
            self.client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=self._etag)


def acquire(
    client: Any,
    bucket: str,
    key: str,
    cluster: str,
    holder: Holder,
    wait: bool,
    notice: Callable[[str], None],
) -> Lease:
    """Create the lock, or take over one whose lease ended; LockHeld (or, with ``wait``,
    waiting) while another run's lease lasts."""
    body = holder.body(time.time()).encode()
    said = -WAIT_NOTICE_S
    while True:
        sent = time.monotonic()
        try:
            answer = client.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")
            return Lease(client, bucket, key, holder, answer["ETag"], sent, None)
        except ConditionFailed:
            pass
        seen = view(client, bucket, key)
        if seen is None:
            continue  # released since: try again
        assert seen.remaining_s is not None
        who = seen.who
        if seen.remaining_s <= 0:
            sent = time.monotonic()
            try:
                answer = client.put_object(Bucket=bucket, Key=key, Body=body, IfMatch=seen.version)
            except NOT_AS_SEEN:
                continue  # another run took it first, or it was released
            notice(
                f"took over the lock of cluster {cluster}: its lease ended "
                f"{-seen.remaining_s:.0f} s ago, held by {who}"
            )
            return Lease(client, bucket, key, holder, answer["ETag"], sent, seen.holder)
        ends = stamp(time.time() + seen.remaining_s)
        if not wait:
            raise LockHeld(
                f"cluster {cluster} is being changed by {who}; its lease ends at {ends} "
                f"(in {seen.remaining_s:.0f} s) unless that run renews it",
                f"pass --wait to wait for it; if that run is gone for good, `fmctl unlock "
                f"{cluster}`",
                seen.holder,
            )
        if time.monotonic() - said >= WAIT_NOTICE_S:
            notice(f"waiting for the lock of cluster {cluster}, held by {who} (lease ends {ends})")
            said = time.monotonic()
        time.sleep(min(max(seen.remaining_s, 0.2), 5.0))
