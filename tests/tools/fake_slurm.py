"""A login node's Slurm for the sandbox's PCS clusters: what Run Command's scripts (the
drains of `up`) find on PATH there. scontrol records every call; squeue prints the jobs a
test writes into ``squeue.txt`` (none by default). drain-nodes.sh itself is run against a
real slurmctld in tests/slurm/test_standin_drain.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.check import fakes
from tests.engine.harness import Sandbox

SLURM = {
    "scontrol": '#!/bin/bash\necho "scontrol $*" >> "$FAKE/calls"\n',
    "squeue": '#!/bin/bash\necho "squeue $*" >> "$FAKE/calls"\ncat "$FAKE/squeue.txt"\n',
}


@contextlib.contextmanager
def login_slurm(sandbox: Sandbox, folder: Path) -> Iterator[Path]:
    """Install the fakes as the sandbox's node tools; ``folder`` holds calls and
    squeue.txt."""
    real, tools = fakes.install(folder / "fakes", SLURM), folder / "tools"
    tools.mkdir(parents=True)
    (folder / "squeue.txt").write_text("")
    (folder / "calls").write_text("")
    for name in SLURM:
        wrapper = tools / name
        wrapper.write_text(f'#!/bin/bash\nexport FAKE="{folder}"\nexec "{real / name}" "$@"\n')
        wrapper.chmod(0o755)
    sandbox.node_tools(tools)
    try:
        yield folder
    finally:
        sandbox.node_tools(None)


def calls(folder: Path) -> list[str]:
    """What the fakes were asked, a line each."""
    return [line for line in (folder / "calls").read_text().splitlines() if line]
