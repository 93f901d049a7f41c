"""One sandbox emulator for the engine tests, stopped at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.sandbox import daemon
from tests.engine.harness import Sandbox, start


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    home = Path(tmp_path_factory.mktemp("fmctl-home"))
    box = start(home)
    yield box
    daemon.stop(home)


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
