"""Ctrl-C and prompts, as a user at a terminal meets them: an interrupted `up` exits 130 and
says that running it again resumes (and it does); a declined prompt says nothing changed,
exits 1 and changes nothing; neither reads as a bug to report."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.engine.harness import ROOT, Sandbox, owned, region_of, spec_file


def _at_terminal(sandbox: Sandbox, args: tuple[str, ...], answer: str) -> tuple[int, str]:
    """Run fmctl on a pseudo-terminal (its prompts ask only a terminal), answer the first
    question it asks with ``answer``; its exit status and everything it printed."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "provisioner", *args],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        cwd=ROOT,
        env=sandbox.env(),
    )
    os.close(follower)
    out, answered, deadline = b"", False, time.monotonic() + 240
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1)
        if ready:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed: fmctl exited
                break
            if not chunk:
                break
            out += chunk
            if not answered and b"[y/N]" in out:
                os.write(leader, answer.encode() + b"\n")
                answered = True
        elif proc.poll() is not None:
            break
    os.close(leader)
    return proc.wait(timeout=60), out.decode(errors="replace")


def test_ctrl_c_exits_130_and_a_declined_prompt_changes_nothing(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    name = "e2e-signals"
    spec = spec_file(tmp_path, name)
    region = region_of(spec)

    code, text = _at_terminal(sandbox, ("up", "-f", str(spec), "--sandbox"), "n")
    assert code == 1, text
    assert "nothing changed" in text and "report it" not in text
    assert owned(sandbox, name, region) == []

    proc = sandbox.spawn("up", "-f", str(spec), "--sandbox", "--yes")
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if " creating" in line:
            proc.send_signal(signal.SIGINT)
            break
    rest, _ = proc.communicate(timeout=120)
    text = "".join(lines) + rest
    assert proc.returncode == 130, text
    assert "interrupted: `fmctl up` again resumes where this stopped" in text
    assert "report it" not in text and "Traceback" not in text
    again = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr

    code, text = _at_terminal(sandbox, ("down", name, "--region", region, "--sandbox"), "n")
    assert code == 1, text
    assert "nothing changed" in text and "report it" not in text and "Aborted" not in text
    assert owned(sandbox, name, region) != []
    # Before asking, it said what it deletes, and plainly which data goes and which stays.
    assert f"down {name} in {region} deletes:" in text and " vpc " in text
    assert "warning: the FSx file system fs-" in text
    assert "(9,600 GiB of capacity) are deleted: what was not exported to S3 is lost" in text
    assert "stays: s3://acme-ml-data/" in text
    down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes", timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
