"""The S3 backend and its leased lock, against moto's S3 (in-process): the conditions the
lock rests on, takeover, fencing, compare-and-swap writes, and the audit log's reading.
(End to end, with the real fmctl on two machines: tests/reliability/test_team_state.py.)"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.drivers.aws_errors import typed_errors
from provisioner.state import lease
from provisioner.state.errors import LeaseLost, LockHeld, StateConflict
from provisioner.state.location import BadStateUrl, StateLocation, parse_state_url
from provisioner.state.records import Holder
from provisioner.state.s3 import S3Backend
from provisioner.state.store import ClusterState

BUCKET = "unit-fmctl-state"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import boto3
    from moto import mock_aws

    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        # Typed errors, as every client the product makes (drivers.aws.Aws.client) raises.
        client = typed_errors(boto3.client("s3", region_name="us-east-1"))
        client.create_bucket(Bucket=BUCKET)
        client.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        yield client


def _holder(run: str, lease_s: float = 30.0) -> Holder:
    """A holder whose lease outlasts the test (expiry is tested by moving S3's clock)."""
    return Holder(
        run, f"arn:aws:iam::123456789012:user/{run}", "host", 4242, "up", "", time.time(), lease_s
    )


def _backend(s3: Any, cluster: str = "c1") -> S3Backend:
    return S3Backend(s3, StateLocation(BUCKET, "team"), cluster)


def test_state_urls() -> None:
    assert parse_state_url("s3://team-state/ml/") == StateLocation("team-state", "ml")
    assert parse_state_url("s3://team-state").prefix == "fmctl"
    assert parse_state_url("local").local
    for bad in ("team-state/ml", "s3://Team_State/ml", "s3://a/ml", "https://x/y"):
        with pytest.raises(BadStateUrl):
            parse_state_url(bad)


def test_a_held_lock_refuses_naming_its_holder(s3: Any) -> None:
    first = _backend(s3).lock(_holder("one"), False, print)
    try:
        with pytest.raises(LockHeld) as held:
            _backend(s3).lock(_holder("two"), False, print)
        assert held.value.holder is not None and held.value.holder.run == "one"
        assert "user/one on host (pid 4242, `fmctl up`" in str(held.value)
        assert "--wait" in (held.value.hint or "")
    finally:
        first.release()
    again = _backend(s3).lock(_holder("two"), False, print)
    again.release()
    assert _backend(s3).peek() is None


def test_an_expired_lock_is_taken_over_once(s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    gone = _backend(s3).lock(_holder("gone"), False, print)
    gone._stop.set()  # a holder that stopped renewing (killed)
    # S3's clock says its lease ended (moto in-process sends no Date header: move ours).
    monkeypatch.setattr(lease, "server_now", lambda answer: time.time() + 60)
    said: list[str] = []
    taker = _backend(s3).lock(_holder("taker"), False, said.append)
    assert taker.took_over is not None and taker.took_over.run == "gone"
    assert "took over the lock of cluster c1" in said[0] and "user/gone" in said[0]
    monkeypatch.undo()
    gone.release()  # its conditional delete fails: it never deletes the taker's lock
    seen = _backend(s3).peek()
    assert seen is not None and seen.holder is not None and seen.holder.run == "taker"
    taker.release()
    assert _backend(s3).peek() is None


def _lock_versions(s3: Any) -> int:
    """How many times the lock object was written (the bucket is versioned)."""
    found = s3.list_object_versions(Bucket=BUCKET, Prefix="team/c1/lock.json")
    return len(found.get("Versions", []))


def _late(held: lease.Lease) -> None:
    """Make ``held`` a run whose renewals came late: none comes now, and the lease's safe
    part has passed (S3's clock may still count it: S3 stamps LastModified after the send)."""
    held._stop.set()
    held._thread.join(timeout=5)
    held._safe_until = time.monotonic() - 0.1


def test_fence_renews_a_late_lease_nobody_took_over(s3: Any) -> None:
    """A run starved of CPU (or of S3's answers) past its lease's safe part goes on when
    its If-Match renewal still lands: nobody can have taken the lock over."""
    held = _backend(s3).lock(_holder("slow", lease_s=4.0), False, print)
    _late(held)
    assert held.lost and _lock_versions(s3) == 1
    held.fence()
    assert not held.lost
    assert _lock_versions(s3) == 2  # the fence's renewal landed
    held.release()
    assert _backend(s3).peek() is None


def test_fence_stops_a_late_run_whose_lock_was_taken_over(s3: Any) -> None:
    held = _backend(s3).lock(_holder("slow", lease_s=4.0), False, print)
    _late(held)
    s3.put_object(Bucket=BUCKET, Key="team/c1/lock.json", Body=b"{}")  # someone else's now
    with pytest.raises(LeaseLost, match="renewing it now did not land"):
        held.fence()
    with pytest.raises(LeaseLost):
        held.fence()  # for good: the lock is not taken back
    held.release()
    # Lost: the lock is left alone (it is another run's).
    assert s3.get_object(Bucket=BUCKET, Key="team/c1/lock.json")["Body"].read() == b"{}"


def test_a_late_run_releases_its_lock_if_still_its_own(s3: Any) -> None:
    """Finished past its safe part with nobody waiting: the lock is deleted (If-Match),
    not left for the next run to wait out."""
    held = _backend(s3).lock(_holder("slow", lease_s=4.0), False, print)
    _late(held)
    held.release()
    assert _backend(s3).peek() is None


def test_renewal_keeps_the_lease_and_notices_a_takeover(s3: Any) -> None:
    held = _backend(s3).lock(_holder("long", lease_s=6.0), False, print)
    first = s3.head_object(Bucket=BUCKET, Key="team/c1/lock.json")["ETag"]
    time.sleep(5.0)  # past the 4.4 s the first put was safe for: renewals (each 1.5 s) kept it
    held.fence()
    assert s3.head_object(Bucket=BUCKET, Key="team/c1/lock.json")["ETag"] != first
    s3.put_object(Bucket=BUCKET, Key="team/c1/lock.json", Body=b"{}")  # someone else's now
    time.sleep(3.5)  # the next renewal's If-Match fails (or, late, the lease runs out)
    with pytest.raises(LeaseLost):
        held.fence()
    held.release()


def test_state_writes_compare_and_swap(s3: Any, tmp_path: Path) -> None:
    mine = ClusterState(tmp_path, "c1", _backend(s3))
    mine.save_spec("a: 1\n")
    other = _backend(s3)
    other.read("spec.yaml")
    other.write("spec.yaml", "a: 2\n")
    with pytest.raises(StateConflict) as conflict:
        mine.save_spec("a: 3\n")
    assert "changed since this run read it" in str(conflict.value)
    assert mine.spec_text() == "a: 2\n"


def test_history_marks_a_run_that_was_taken_over(
    s3: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    first = ClusterState(tmp_path, "c1", _backend(s3))
    first.lock(_holder("first"), False, print)
    first.audit_start(("create vpc",))
    first._held._stop.set()  # type: ignore[union-attr]  # killed: stops renewing
    monkeypatch.setattr(lease, "server_now", lambda answer: time.time() + 60)
    second = ClusterState(tmp_path, "c1", _backend(s3))
    second.lock(_holder("second"), False, print)
    monkeypatch.undo()
    second.audit_start(("create vpc",))
    second.audit_finish("ok")
    second.unlock()
    runs = ClusterState(tmp_path, "c1", _backend(s3)).history()
    assert [(r.run, r.result) for r in runs] == [
        ("first", "interrupted (taken over by second)"),
        ("second", "ok"),
    ]
    assert runs[1].took_over is not None and runs[1].took_over.startswith("first (")


def test_a_released_lock_fences_what_is_still_running(s3: Any, tmp_path: Path) -> None:
    """After Ctrl-C the lock is released while the run's threads may still be going: from
    then on the fence refuses their changes, with either backend."""
    for backend in (None, _backend(s3)):
        state = ClusterState(tmp_path, "c1", backend)
        state.lock(_holder("ctrl-c"))
        state.fence()
        held = state._held
        state.unlock()
        assert held is not None
        with pytest.raises(LeaseLost, match="released"):
            held.fence()


def test_a_local_lock_names_its_live_holder(tmp_path: Path) -> None:
    first = ClusterState(tmp_path, "c1")
    first.lock(_holder("here"))
    try:
        with pytest.raises(LockHeld, match=r"user/here on host \(pid 4242"):
            ClusterState(tmp_path, "c1").lock(_holder("there"))
        seen = ClusterState(tmp_path, "c1").peek_lock()
        assert seen is not None and seen.remaining_s is None  # lasts as long as its process
        assert seen.holder is not None and seen.holder.run == "here"
    finally:
        first.unlock()
    assert ClusterState(tmp_path, "c1").peek_lock() is None
