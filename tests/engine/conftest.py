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
    sandbox.faults([])
    yield
    sandbox.faults([])
