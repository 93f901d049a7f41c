"""The reliability campaign: the engine tests' emulator fixtures, its own emulator (so the
calls it counts are its own), and the tally written at the end when asked."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.conftest import listed_calls, no_faults
from tests.engine.harness import Sandbox
from tests.reliability.campaign import tally

__all__ = ["listed_calls", "no_faults"]


@pytest.fixture(scope="session", autouse=True)
def campaign(sandbox: Sandbox) -> Iterator[None]:
    """Write the tally once every campaign test has run: to FMCTL_RELIABILITY_REPORT plus
    the worker's name (each test worker has its own emulator and counts; the report adds up
    the parts)."""
    yield
    target = os.environ.get("FMCTL_RELIABILITY_REPORT")
    if target:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        tally.write(Path(f"{target}.{worker}"), sandbox.requests())
