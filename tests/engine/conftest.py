"""The engine tests' emulator (the session's one, tests/conftest.py) with no fault left
over between tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.engine.harness import Sandbox
from tests.tools import permissions


@pytest.fixture(autouse=True)
def no_faults(sandbox: Sandbox) -> Iterator[None]:
    """No injected fault outlives its test, and a test in which the emulator failed to
    handle a request fails, with the emulator's traceback."""
    sandbox.faults([])
    since = sandbox.log_size()
    yield
    sandbox.faults([])
    failures = sandbox.failures(since)
    assert not failures, "the sandbox failed on a request:\n" + "\n\n".join(failures)


@pytest.fixture(autouse=True)
def listed_calls(sandbox: Sandbox, request: pytest.FixtureRequest) -> Iterator[None]:
    """Every AWS call fmctl made in the test is one its permissions list covers
    (tests/tools/permissions.py)."""
    start = len(sandbox.requests())
    yield
    unlisted = permissions.check(sandbox.requests()[start:], request.node.nodeid)
    assert not unlisted, (
        "fmctl called what its permissions list (provisioner/catalog/permissions.py) "
        f"does not cover: {', '.join(unlisted)}"
    )
