"""The progress view: state changes as they come, and the resources waiting on AWS with
their elapsed time against what they are expected to take."""

from __future__ import annotations

import io

from provisioner.cli.progress import LOG_EVERY, TERMINAL_EVERY, Progress
from provisioner.resources.context import Event


def _view() -> tuple[Progress, io.StringIO]:
    out = io.StringIO()
    return Progress(out), out


def test_waiting_resources_show_elapsed_against_expected() -> None:
    view, out = _view()
    t0 = view.start
    view(Event("fsx", "creating", at=t0 + 1))
    view(Event("fsx", "waiting", "file system fs-1 to be AVAILABLE", at=t0 + 2, expected=600))
    view(Event("eks", "creating", at=t0 + 3))
    view(Event("eks", "waiting", "cluster to be ACTIVE", at=t0 + 4, expected=600))
    view(Event("eks", "ready", "e1", at=t0 + 300))
    view.tick(t0 + 251)
    view.close()
    last = out.getvalue().splitlines()[-1]
    # fsx since its create began, 4m10s of ~10m; eks is done and says nothing more.
    assert last.endswith("fsx                                creating  4m10s of ~10m"), last
    assert not any("eks" in line and " of ~" in line for line in out.getvalue().splitlines())


def test_nothing_waits_nothing_is_said() -> None:
    view, out = _view()
    view(Event("vpc", "creating", at=view.start))
    view(Event("vpc", "ready", "vpc-1", at=view.start + 1))
    before = out.getvalue()
    view.tick(view.start + 100)
    view.close()
    assert out.getvalue() == before


def test_every_30s_on_a_terminal_and_60s_in_a_log() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert Progress(Tty()).every == TERMINAL_EVERY == 30.0
    assert Progress(io.StringIO()).every == LOG_EVERY == 60.0


def test_the_interval_lines_come_by_themselves() -> None:
    import time

    out = io.StringIO()
    view = Progress(out, every=0.05)
    view(Event("fsx", "creating"))
    view(Event("fsx", "waiting", "fs", expected=600))
    time.sleep(0.3)
    view.close()
    assert sum(" of ~10m" in line for line in out.getvalue().splitlines()) >= 2
