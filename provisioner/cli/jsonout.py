"""`-o json`: data on stdout, one JSON document per line for `up`, `down` and `gc` (their
events, then a summary), and errors as JSON on stdout too, with a non-zero exit. Notices
and the human-readable error stay on stderr, so a pipe gets data only."""

from __future__ import annotations

import json
import sys
from typing import Any

import click


def is_json() -> bool:
    """True when the running command was given ``-o json``."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.params.get("output") == "json")


def line(data: dict[str, Any]) -> None:
    """One JSON document on one line of stdout."""
    sys.stdout.write(json.dumps(data, default=str, sort_keys=False) + "\n")
    sys.stdout.flush()


def error(message: str, hint: str | None = None, **more: Any) -> None:
    """The error as data: ``{"error": {"message", "hint", ...}}``."""
    line({"error": {"message": message, "hint": hint, **more}})


class JsonEvents:
    """The progress of `up`, `down` and `gc` as JSON lines (``{"event": {...}}``)."""

    def __init__(self) -> None:
        import time

        self.start = time.monotonic()

    def __call__(self, event: Any) -> None:
        data = {
            "resource": event.resource,
            "state": event.state,
            "detail": event.detail,
            "t": round(event.at - self.start, 3),
        }
        if event.expected is not None:
            data["expected_s"] = round(event.expected, 1)
        line({"event": data})

    def close(self) -> None:
        """Nothing runs in the background."""
