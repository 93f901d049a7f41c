"""A login node's Slurm for the sandbox's PCS clusters: what Run Command's scripts (the
drains of `up`) find on PATH there. scontrol records every call; squeue prints the jobs a
test writes into ``squeue.txt`` (none by default), sinfo what it writes into ``sinfo.txt``
(cluster-health.sh's format, as the real sinfo prints it in tests/slurm/
test_standin_health.py); scancel records. drain-nodes.sh and
block-end.sh themselves run against a real slurmctld in tests/slurm/test_standin_drain.py
and test_standin_block_end.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.check import fakes
from tests.engine.harness import Sandbox

#: scontrol keeps the reservations it creates (their names in ``reservations``): `show
#: reservation NAME` fails for one it did not, as Slurm's does; `show reservation -o` lists
#: them one a line (ReservationName=NAME first), or says there are none.
SCONTROL = """#!/bin/bash
echo "scontrol $*" >> "$FAKE/calls"
case "$1 $2" in
  "show reservation")
    if [ "${3:--o}" = -o ]; then
      if [ -s "$FAKE/reservations" ]; then
        sed 's/^/ReservationName=/; s/$/ Nodes=(null)/' "$FAKE/reservations"
      else
        echo "No reservations in the system"
      fi
    else
      grep -qx "$3" "$FAKE/reservations"
    fi ;;
  "create reservation")
    for arg in "$@"; do
      case "$arg" in ReservationName=*) echo "${arg#*=}" >> "$FAKE/reservations" ;; esac
    done ;;
esac
"""
SLURM = {
    "scontrol": SCONTROL,
    "squeue": '#!/bin/bash\necho "squeue $*" >> "$FAKE/calls"\ncat "$FAKE/squeue.txt"\n',
    "scancel": '#!/bin/bash\necho "scancel $*" >> "$FAKE/calls"\n',
    "sinfo": '#!/bin/bash\necho "sinfo $*" >> "$FAKE/calls"\ncat "$FAKE/sinfo.txt"\n',
}


@contextlib.contextmanager
def login_slurm(sandbox: Sandbox, folder: Path) -> Iterator[Path]:
    """Install the fakes as the sandbox's node tools; ``folder`` holds calls and
    squeue.txt."""
    real, tools = fakes.install(folder / "fakes", SLURM), folder / "tools"
    tools.mkdir(parents=True)
    (folder / "squeue.txt").write_text("")
    (folder / "sinfo.txt").write_text("")
    (folder / "calls").write_text("")
    (folder / "reservations").write_text("")
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
