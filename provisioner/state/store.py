"""A cluster's state: the spec `up` applied, the outputs, the NCCL baselines, the event log,
the audit log and the run lock, kept in a backend (the local folder, or S3 for a team).

Writes go through the held lock's fence: a run whose lease is gone writes nothing more.
This machine's folder (``HOME/clusters/NAME``) always exists too, for what is this
machine's only: the kubeconfig, its own copy of the event log.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from provisioner.state.backend import Backend, LockView, RunLock
from provisioner.state.errors import LockHeld
from provisioner.state.local import LocalBackend, append_private, write_private
from provisioner.state.records import AuditEntry, Holder, stamp

__all__ = ["ClusterState", "LockHeld", "fmctl_home", "write_private"]

#: The objects a run replaces (compare-and-swap against what it saw when it took the lock).
REPLACED = ("spec.yaml", "outputs.json", "nccl-baselines.json", "cluster.json")


def fmctl_home(explicit: str | None = None) -> Path:
    """``--state-dir``, else ``FMCTL_HOME``, else ``~/.fmctl``."""
    return Path(explicit or os.environ.get("FMCTL_HOME") or Path.home() / ".fmctl")


class ClusterState:
    """One cluster's state in ``backend`` (local by default), and this machine's folder."""

    def __init__(self, home: Path, name: str, backend: Backend | None = None) -> None:
        self.home = home
        self.name = name
        self.folder = home / "clusters" / name
        self.backend: Backend = backend or LocalBackend(self.folder)
        self._held: RunLock | None = None
        self._holder: Holder | None = None
        self._audit: AuditEntry | None = None
        self._events: list[str] = []
        self._events_lock = threading.Lock()
        #: How many events the shared state has (a flush with nothing new writes nothing).
        self._flushed = 0

    @property
    def shared(self) -> bool:
        """True when the state is not this machine's folder."""
        return not isinstance(self.backend, LocalBackend)

    @property
    def shared_url(self) -> str | None:
        """``s3://BUCKET/PREFIX`` of a shared state; None for this machine's folder."""
        return self.backend.where.rsplit("/", 1)[0] if self.shared else None

    # -- objects ------------------------------------------------------------------------
    def _write(self, name: str, text: str) -> None:
        if self._held is not None:
            self._held.fence()
        self.backend.write(name, text)

    def _json(self, name: str, empty: Any) -> Any:
        stored = self.backend.read(name)
        try:
            return json.loads(stored.text) if stored else empty
        except ValueError:
            return empty

    def save_spec(self, text: str) -> None:
        """Keep the spec `up` applied."""
        self._write("spec.yaml", text)

    def spec_text(self) -> str | None:
        """The spec `up` last applied, or None."""
        stored = self.backend.read("spec.yaml")
        return stored.text if stored else None

    def save_region(self, region: str) -> None:
        """Keep the region a run works in, before its first change (``cluster.json``): a
        first `up` cut short has no applied spec yet, and its resources still need a
        `down` that knows where to look."""
        if self.region() != region:
            self._write("cluster.json", json.dumps({"region": region}))

    def region(self) -> str | None:
        """The region of the spec last applied, else of the last run that began changing
        the cluster; None when neither is recorded."""
        import yaml

        from provisioner.drivers import yamlio

        try:
            doc = yamlio.load(self.spec_text() or "")
        except yaml.YAMLError:
            doc = None
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        region = meta.get("region") if isinstance(meta, dict) else None
        if not region:
            region = self._json("cluster.json", {}).get("region")
        return region if isinstance(region, str) and region else None

    def save_outputs(self, outputs: dict[str, Any]) -> None:
        """Keep the outputs of the last run."""
        self._write("outputs.json", json.dumps(outputs, indent=1, sort_keys=True))

    def outputs(self) -> dict[str, Any]:
        """Outputs of the last run, or {} when there are none."""
        data: dict[str, Any] = self._json("outputs.json", {})
        return data

    def save_nccl_baselines(self, rows: list[dict[str, Any]]) -> None:
        """Keep the pools' NCCL baselines (`fmctl check --save-baseline`)."""
        self._write("nccl-baselines.json", json.dumps(rows, indent=1))

    def nccl_baselines(self) -> list[dict[str, Any]]:
        """The saved NCCL baselines, or [] when there are none."""
        rows: list[dict[str, Any]] = self._json("nccl-baselines.json", [])
        return rows

    # -- the event log ------------------------------------------------------------------
    def log(self, event: dict[str, Any]) -> None:
        """Append to the event log (this machine's file; the shared state's at each lease
        renewal and at the end of the run)."""
        line = json.dumps({"time": time.time(), **event})
        append_private(self.folder / "events.log", line)
        if self.shared and self._holder is not None:
            with self._events_lock:
                self._events.append(line)

    def flush_events(self) -> None:
        """Write this run's events to the shared state (its own object: no condition)."""
        if not self.shared or self._holder is None or self._held is None:
            return
        with self._events_lock:
            count = len(self._events)
            text = "".join(line + "\n" for line in self._events)
        if text and count != self._flushed:
            self._held.fence()
            since = stamp(self._holder.since).replace(":", "")
            self.backend.add(f"events/{since}-{self._holder.run}.jsonl", text)
            self._flushed = count

    # -- the lock -----------------------------------------------------------------------
    def lock(
        self, holder: Holder, wait: bool = False, notice: Callable[[str], None] = print
    ) -> RunLock:
        """Take the run lock (LockHeld naming the holder when another run has it), and note
        the versions of the objects this run may replace."""
        held = self.backend.lock(holder, wait, notice)
        try:
            self.backend.remember(REPLACED)
        except BaseException:
            held.release()  # a lock nobody will use would block the team for a lease
            raise
        self._held, self._holder = held, holder
        self.backend.guard(held.fence)
        held.on_renew = self._flush_quietly
        return held

    def _flush_quietly(self) -> None:
        # A failure here is retried at the next renewal, or at the end of the run.
        with contextlib.suppress(Exception):
            self.flush_events()

    def fence(self) -> None:
        """Raise LeaseLost when the lock may no longer be this run's."""
        if self._held is not None:
            self._held.fence()

    def unlock(self) -> None:
        """Flush the events and release the lock (a lost lock is left alone)."""
        held = self._held
        if held is None:
            return
        try:
            if not held.lost:
                self._flush_quietly()
        finally:
            self._held = None
            held.release()

    def peek_lock(self) -> LockView | None:
        """Who holds the lock now (reads only)."""
        return self.backend.peek()

    def break_lock(self, seen: LockView, by: str = "") -> bool:
        """Remove the lock ``seen`` (only if it is still that one); the run that held it is
        recorded in the audit log as ended by ``by`` (who unlocked it), when it has an
        entry still running."""
        if not self.backend.break_lock(seen):
            return False
        if seen.holder is not None and by:
            for name in self.backend.names("audit/"):
                stored = self.backend.read(name)
                entry = AuditEntry.parse(stored.text) if stored else None
                if entry is not None and entry.run == seen.holder.run and entry.result == "running":
                    self.backend.add(name, entry.unlocked(by).text())
        return True

    # -- the audit log ------------------------------------------------------------------
    def audit_start(self, changes: tuple[str, ...]) -> None:
        """Record, before the first change, who changes what (the held lock's run)."""
        assert self._holder is not None and self._held is not None
        took = self._held.took_over
        entry = AuditEntry.start(
            self._holder, changes, f"{took.run} ({took.describe()})" if took else None
        )
        self._held.fence()
        self.backend.add(entry.key, entry.text())
        self._audit = entry

    def audit_finish(self, result: str) -> None:
        """Record how the run ended (nothing when its lease was lost: it writes nothing)."""
        if self._audit is None or self._held is None:
            return
        entry, self._audit = self._audit.finish(result), None
        self._held.fence()
        self.backend.add(entry.key, entry.text())

    def history(self) -> list[AuditEntry]:
        """Every recorded run, oldest first; a run that never finished and was not taken
        over is shown as it was left ("running")."""
        entries = []
        for name in self.backend.names("audit/"):
            stored = self.backend.read(name)
            entry = AuditEntry.parse(stored.text) if stored else None
            if entry is not None:
                entries.append(entry)
        taken = {e.took_over.split(" ")[0]: e.run for e in entries if e.took_over}
        out = []
        for e in sorted(entries, key=lambda e: e.started):
            if e.result == "running" and e.run in taken:
                e = replace(e, result=f"interrupted (taken over by {taken[e.run]})")
            out.append(e)
        return out
