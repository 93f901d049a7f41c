"""gpu-signal.sh on a node, as Run Command runs it on an EKS block's nodes at T-60: the very
text fmctl's schedule sends (``block_ends.signal_command``), through bash as root with the
SSM agent's environment, in a stand-in node whose processes live in a PID namespace of its
own. The processes nvidia-smi lists as on the GPUs hear the signal once each (one on two
GPUs too), a process on no GPU hears nothing, a listed process that has ended is said to be
gone, and a driver that does not answer fails the run."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from provisioner.resources.block_ends import signal_command
from tests.conftest import ROOT
from tests.tools.standin import rootfs
from tests.tools.standin.node import SSM_ENV, StandinNode

pytestmark = rootfs.required()
#: A rank that checkpoints on the signal, as a training loop's handler would: it notes each
#: signal it hears in /root/heard-PID, and says its pid (the node's) once it listens.
RANK = (
    "trap 'echo {sig} >>/root/heard-$$' {sig}; echo $$ >>/root/started; while :; do sleep 0.1; done"
)


@pytest.fixture(scope="module")
def node() -> Iterator[StandinNode]:
    made = StandinNode(rootfs.ensure(), "ip-10-0-21-5")
    try:
        # The driver answers (a p5en's eight GPUs: tests/data/check/README.md).
        made.write(
            "/etc/standin/nvidia-smi.csv",
            (ROOT / "tests/data/check/nvidia-smi-p5en.csv").read_text(),
        )
        yield made
    finally:
        made.stop()


def _ranks(node: StandinNode, count: int, sig: str = "USR1") -> list[int]:
    """Start ``count`` processes on the node; their pids there."""
    started = node.path("/root/started")
    started.unlink(missing_ok=True)
    for _ in range(count):
        node.daemon(["/bin/bash", "-c", RANK.format(sig=sig)])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pids = started.read_text().split() if started.exists() else []
        if len(pids) == count:
            return [int(p) for p in pids]
        time.sleep(0.05)
    raise AssertionError(f"{count} processes did not start on the node")


def _heard(node: StandinNode, pid: int) -> list[str]:
    path = node.path(f"/root/heard-{pid}")
    return path.read_text().split() if path.exists() else []


def _send(node: StandinNode, apps: list[int | str], sig: str = "USR1") -> tuple[int, str]:
    node.write("/etc/standin/gpu-apps", "".join(f"{a}\n" for a in apps))
    done = node.run(["/bin/bash", "-c", signal_command(sig)], env=SSM_ENV, timeout=60)
    return done.returncode, done.stdout + done.stderr


def test_the_gpu_processes_hear_the_signal_once_and_no_other(node: StandinNode) -> None:
    one, two, idle = _ranks(node, 3)
    # The driver lists a process once per GPU it uses: `two` is on two GPUs.
    code, out = _send(node, [one, two, two])
    assert code == 0, out
    lines = out.strip().splitlines()
    assert sorted(lines[:-1]) == sorted([f"signalled {one} USR1", f"signalled {two} USR1"])
    assert lines[-1] == "done 2", out
    deadline = time.monotonic() + 10
    while not (_heard(node, one) and _heard(node, two)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _heard(node, one) == ["USR1"] and _heard(node, two) == ["USR1"]
    assert _heard(node, idle) == []  # on no GPU: not the pool's work


def test_a_spec_signal_a_gone_process_and_no_process(node: StandinNode) -> None:
    (rank,) = _ranks(node, 1, "USR2")
    code, out = _send(node, [rank, 4194000], "USR2")  # the second ended since it was listed
    assert code == 0, out
    assert out.strip().splitlines() == [f"signalled {rank} USR2", "gone 4194000", "done 1"]
    # Nothing on the GPUs: nothing signalled, and that is no failure.
    code, out = _send(node, [])
    assert (code, out.strip()) == (0, "done 0"), out


def test_a_driver_that_does_not_answer_fails_the_run(node: StandinNode) -> None:
    recorded = node.path("/etc/standin/nvidia-smi.csv")
    kept = recorded.read_text()
    recorded.unlink()  # the stand-in's driver "not loaded"
    try:
        code, out = _send(node, [1])
    finally:
        recorded.write_text(kept)
    assert code == 1, out
    assert "gpu-signal.sh: nvidia-smi failed" in out and "NVIDIA driver" in out, out


def test_a_signal_that_is_no_checkpoint_is_refused(node: StandinNode) -> None:
    code, out = _send(node, [1], "KILL")
    assert code == 2 and "KILL is not a checkpoint signal" in out, out
