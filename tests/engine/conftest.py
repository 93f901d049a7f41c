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
    """Every AWS call fmctl made is one its permissions list covers, on IAM names its policy
    lets it touch (tests/tools/permissions.py): checked after each test, over all the log
    has gained since the last check, so a module's fixture's runs (a crash campaign's) are
    checked too, with the test that first follows them."""
    yield
    entries = sandbox.requests()
    if len(entries) < sandbox.checked:  # a restarted emulator: its log began again
        sandbox.checked = 0
    unlisted = permissions.check(entries[sandbox.checked :], request.node.nodeid)
    sandbox.checked = len(entries)
    assert not unlisted, (
        "fmctl called what its permissions list (provisioner/catalog/permissions.py) "
        f"does not cover: {', '.join(unlisted)}"
    )
