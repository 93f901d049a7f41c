"""Durations as the spec writes them: ``8h``, ``3d``, ``1h30m`` (days, hours, minutes)."""

from __future__ import annotations

import re

DURATION_RE = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?$")


def seconds(text: str) -> int | None:
    """Seconds in a duration such as ``8h``, ``3d`` or ``1h30m``; None when malformed or
    zero."""
    match = DURATION_RE.match(text)
    if not text or not match:
        return None
    days, hours, minutes = (int(g) if g else 0 for g in match.groups())
    total = ((days * 24 + hours) * 60 + minutes) * 60
    return total or None
