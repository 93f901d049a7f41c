"""The local state's lock (an flock on HOME/clusters/NAME/lock): a second run is refused
with the holder named, or with --wait says whose run it waits for, then gets the lock."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from provisioner.state.errors import LockHeld
from provisioner.state.local import LocalBackend
from provisioner.state.records import Holder


def _holder(pid: int, command: str) -> Holder:
    return Holder("run-1", "arn:aws:iam::123456789012:user/ada", "laptop", pid, command, "", 0, 60)


def test_a_held_lock_is_refused_naming_the_holder(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "clusters" / "c1")
    first = backend.lock(_holder(111, "up"), wait=False, notice=print)
    try:
        with pytest.raises(LockHeld) as refused:
            backend.lock(_holder(222, "down"), wait=False, notice=print)
        assert "pid 111" in str(refused.value) and "--wait" in (refused.value.hint or "")
    finally:
        first.release()


def test_wait_says_whose_run_it_waits_for_then_takes_the_lock(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "clusters" / "c1")
    first = backend.lock(_holder(111, "up"), wait=False, notice=print)
    said: list[str] = []
    got = threading.Event()

    def second() -> None:
        backend.lock(_holder(222, "down"), wait=True, notice=said.append).release()
        got.set()

    waiter = threading.Thread(target=second)
    waiter.start()
    deadline = time.monotonic() + 10
    while not said and time.monotonic() < deadline:
        time.sleep(0.01)
    assert said and "waiting for the lock of cluster c1" in said[0] and "pid 111" in said[0]
    assert not got.is_set(), "it waits while the first run holds the lock"
    first.release()
    waiter.join(10)
    assert got.is_set()
