"""The fork server the end-to-end tests run `fmctl` through (tests/tools/zygote.py) gives
what a fresh process gives: its exit status, its own streams, environment and working
directory, a real pid that signals reach, Ctrl-C as KeyboardInterrupt, SIGKILL as -9."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.conftest import ROOT
from tests.tools import zygote

GOOD = ROOT / "examples" / "p5-slurm-capacity-block.yaml"


def _env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {**clean, "AWS_EC2_METADATA_DISABLED": "true", **extra}


def test_exit_status_and_separate_streams(tmp_path: Path) -> None:
    ok = zygote.run(["validate", "-f", str(GOOD)], _env(), ROOT, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: fmctl.dev/v1alpha1\nkind: Cluster\nmetadata: {name: 1}\n")
    bad = zygote.run(["validate", "-f", "broken.yaml", "-o", "json"], _env(), tmp_path, 60)
    # The relative path resolved in the child's working directory, JSON alone on stdout.
    assert bad.returncode == 1 and '"problems"' in bad.stdout and "broken.yaml" in bad.stdout
    assert "Traceback" not in bad.stderr


def test_the_environment_is_the_callers(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = zygote.run(["validate", "-f", str(GOOD)], _env(FMCTL_HOME=str(home)), ROOT, 60)
    assert done.returncode == 0
    # Nothing of the request leaks into the next run's environment.
    again = zygote.run(["validate", "-f", "-"], _env(), ROOT, 60, stdin="a: [\n")
    assert again.returncode == 1 and "<stdin>:" in again.stdout + again.stderr


def test_signals_reach_the_run_itself() -> None:
    # `validate -f -` reads stdin until it ends: a run that waits until it is signalled.
    waiting = zygote.Forked(
        ["validate", "-f", "-"], _env(), ROOT, subprocess.PIPE, subprocess.PIPE, subprocess.PIPE
    )
    time.sleep(1.0)
    assert waiting.poll() is None
    os.kill(waiting.pid, 0)  # a real process of this machine
    waiting.send_signal(signal.SIGINT)
    _, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 130, err
    killed = zygote.Forked(
        ["validate", "-f", "-"], _env(), ROOT, subprocess.PIPE, subprocess.STDOUT, subprocess.PIPE
    )
    time.sleep(0.5)
    killed.kill()
    assert killed.wait(30) == -signal.SIGKILL


def test_the_socket_is_its_owners_only() -> None:
    zygote.run(["--version"], _env(), ROOT, 60)
    folder = Path(zygote._SERVER["path"]).parent
    assert folder.stat().st_mode & 0o777 == 0o700
