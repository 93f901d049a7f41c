"""The product reaches the sandbox only through its entry point: without the package,
`--sandbox` says how to install it (exit 1, no traceback); the sandbox's own failures become
fmctl's ``SandboxUnavailable``; and nothing of the sandbox is imported to tell its errors."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from provisioner.ops import sandbox_link
from provisioner.ops.errors import SandboxMissing, SandboxUnavailable, as_error
from tests.tools.inprocess import fmctl


def test_the_entry_point_names_the_sandboxs_daemon() -> None:
    (found,) = sandbox_link.entry_points(group=sandbox_link.GROUP, name=sandbox_link.NAME)
    assert found.value == "fmctl_sandbox.daemon"


def test_without_the_package_sandbox_runs_say_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sandbox_link, "entry_points", lambda **_: [])
    with pytest.raises(SandboxMissing) as caught:
        sandbox_link.sandbox()
    assert "pip install 'fmctl[sandbox]'" in (caught.value.hint or "")
    spec = Path(__file__).resolve().parents[2] / "examples" / "p5en-eks-fsx-s3.yaml"
    run = fmctl("plan", "-f", str(spec), "--sandbox", "--state-dir", str(tmp_path))
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "the sandbox is not installed" in run.stderr and "fmctl[sandbox]" in run.stderr


class _Down(Exception):
    """Stands for the sandbox's SandboxError in a client that cannot start."""


class _Broken:
    SandboxError = _Down

    def ensure(self, home: Path) -> tuple[str, float, str]:
        raise _Down("the emulator did not answer within 60 s")

    def running(self, home: Path) -> dict[str, Any] | None:
        return None


def test_the_sandboxs_failures_are_fmctls() -> None:
    box = sandbox_link.Sandbox(_Broken())  # type: ignore[arg-type]
    with pytest.raises(SandboxUnavailable, match="did not answer within 60 s"):
        box.ensure(Path("/nonexistent"))
    with pytest.raises(SandboxUnavailable, match="no sandbox runs for /nonexistent"):
        box.ask(Path("/nonexistent"), "AdvanceClock", {"seconds": 60})


def test_a_raw_sandbox_error_is_told_apart_only_once_the_sandbox_is_loaded() -> None:
    from fmctl_sandbox.daemon import SandboxError

    assert "fmctl_sandbox.daemon" in sys.modules
    error = as_error(SandboxError("port in use"), "fmctl up")
    assert isinstance(error, SandboxUnavailable) and str(error) == "port in use"
    assert not sandbox_link.is_sandbox_error(RuntimeError("port in use"))
