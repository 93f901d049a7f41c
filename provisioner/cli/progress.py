"""The progress view of `up` and `down`: a line per resource state change, with elapsed time,
so a person can follow what runs in parallel and what waits."""

from __future__ import annotations

import sys
import threading
import time
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


class Progress:
    """Prints events as they come (thread-safe)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.start = time.monotonic()
        self.stream = stream or sys.stdout
        self.lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        label = _SHOWN.get(event.state)
        if label is None:
            return
        detail = f"  {event.detail}" if event.detail else ""
        with self.lock:
            print(
                f"  [{event.at - self.start:7.1f}s] {event.resource:<34} {label}{detail}",
                file=self.stream,
                flush=True,
            )
