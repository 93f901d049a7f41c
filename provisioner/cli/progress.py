"""The progress view of `up` and `down`: a line per resource state change, with elapsed time,
so a person can follow what runs in parallel and what waits; and, while resources wait on
AWS, a line per waiting resource with its elapsed time against what it is expected to take
(``fsx  creating  4m10s of ~10m``): every 30 s on a terminal, every 60 s in a log."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import TextIO

from provisioner.ops.target import Event

_SHOWN = {
    "creating": "creating",
    "exists": "exists",
    "ready": "ready",
    "updating": "updating",
    "note": "note",
    "deleting": "deleting",
    "deleted": "deleted",
    "failed": "FAILED",
}
#: States that start work on a resource (what a later wait is part of).
_STARTS = {"creating", "updating", "deleting"}
#: States after which a resource no longer waits.
_ENDS = {"ready", "exists", "deleted", "failed"}
#: Seconds between the lines of waiting resources: on a terminal, and in a log.
TERMINAL_EVERY, LOG_EVERY = 30.0, 60.0


def _duration(seconds: float) -> str:
    """4m10s, 35s, 1h02m (to the nearest second: a difference of two clock readings,
    250 s apart, may come out as 249.99999...)."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _about(seconds: float) -> str:
    """~10m, ~45s, ~1h30m (what a wait is expected to take)."""
    seconds = max(1, round(seconds))
    if seconds < 60:
        return f"~{seconds}s"
    if seconds < 3600:
        return f"~{round(seconds / 60)}m"
    return f"~{seconds // 3600}h{seconds % 3600 // 60:02d}m"


@dataclass
class _Waiting:
    state: str  # creating / updating / deleting
    since: float
    expected: float | None = None


class Progress:
    """Prints events as they come, and the waiting resources at intervals (thread-safe)."""

    def __init__(self, stream: TextIO | None = None, every: float | None = None) -> None:
        self.start = time.monotonic()
        self.stream = stream or sys.stdout
        self.lock = threading.Lock()
        tty = getattr(self.stream, "isatty", lambda: False)()
        self.every = every if every is not None else (TERMINAL_EVERY if tty else LOG_EVERY)
        self.waiting: dict[str, _Waiting] = {}
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()

    def __call__(self, event: Event) -> None:
        with self.lock:
            self._track(event)
            label = _SHOWN.get(event.state)
            if label is not None:
                detail = f"  {event.detail}" if event.detail else ""
                self._line(event.at, f"{event.resource:<34} {label}{detail}")
            if self.waiting and self._ticker is None:
                self._ticker = threading.Thread(
                    target=self._tick_forever, name="fmctl-progress", daemon=True
                )
                self._ticker.start()

    def _track(self, event: Event) -> None:
        if event.state in _STARTS:
            self.waiting[event.resource] = _Waiting(event.state, event.at)
        elif event.state == "waiting" and event.expected is not None:
            known = self.waiting.get(event.resource)
            if known is None:
                self.waiting[event.resource] = _Waiting("waiting", event.at, event.expected)
            elif known.expected is None:
                known.expected = event.expected
        elif event.state in _ENDS:
            self.waiting.pop(event.resource, None)

    def waits(self, now: float) -> list[str]:
        """A line per resource still waiting on AWS: elapsed against expected."""
        lines = []
        for resource, wait in sorted(self.waiting.items()):
            if wait.expected is None:
                continue  # not waiting on AWS (yet): its own events say what it does
            elapsed = _duration(now - wait.since)
            lines.append(f"{resource:<34} {wait.state}  {elapsed} of {_about(wait.expected)}")
        return lines

    def tick(self, now: float | None = None) -> None:
        """Print the waiting resources once."""
        at = time.monotonic() if now is None else now
        with self.lock:
            for line in self.waits(at):
                self._line(at, line)

    def close(self) -> None:
        """Stop the interval lines (the run is over)."""
        self._stop.set()

    def _tick_forever(self) -> None:
        while not self._stop.wait(self.every):
            self.tick()

    def _line(self, at: float, text: str) -> None:
        print(f"  [{at - self.start:7.1f}s] {text}", file=self.stream, flush=True)
