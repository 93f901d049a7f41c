"""Starting, finding and stopping the sandbox emulator (a background process).

The sandbox's state lives in that process, so it persists between commands until
`fmctl sandbox stop` (or the machine restarts). Its address is in FMCTL_HOME/sandbox.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

#: Documented durations are multiplied by this in the sandbox (10 min of FSx -> 3 s).
DEFAULT_SCALE = 0.005


class SandboxError(Exception):
    """The emulator could not be started or reached."""


def _folder(home: Path) -> Path:
    folder = home / "sandbox"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder


def control(info: dict[str, Any], path: str, body: Any = None) -> Any:
    """Call a control endpoint of the emulator (``/_fmctl/...``); JSON in and out."""
    context = ssl.create_default_context(cafile=info["ca"])
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"https://127.0.0.1:{info['port']}{path}",
        data=data,
        method="POST" if data is not None else "GET",
    )
    with urllib.request.urlopen(request, timeout=5, context=context) as answer:
        return json.loads(answer.read())


def _healthy(info: dict[str, Any]) -> bool:
    try:
        return bool(control(info, "/_fmctl/health").get("ok"))
    except (OSError, ValueError, KeyError):
        return False


def running(home: Path) -> dict[str, Any] | None:
    """The running emulator's {"port", "pid", "scale", "ca"}, or None."""
    path = _folder(home) / "endpoint.json"
    try:
        info: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return info if _healthy(info) else None


def ensure(home: Path, scale: float | None = None) -> tuple[str, float, str]:
    """The emulator's endpoint URL, time scale and CA bundle, starting it if needed."""
    info = running(home)
    if info is None:
        try:
            import moto  # noqa: F401
        except ImportError as exc:
            raise SandboxError("the sandbox needs moto: pip install 'fmctl[sandbox]'") from exc
        folder = _folder(home)
        ready = folder / "endpoint.json"
        ready.unlink(missing_ok=True)
        if scale is None:
            scale = float(os.environ.get("FMCTL_SANDBOX_SCALE", DEFAULT_SCALE))
        log = open(folder / "server.log", "ab")  # noqa: SIM115 - handed to the child
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "provisioner.sandbox.server",
                "--ready-file",
                str(ready),
                "--scale",
                str(scale),
            ],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "AWS_EC2_METADATA_DISABLED": "true"},
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            info = running(home)
            if info is not None:
                break
            time.sleep(0.1)
        else:
            raise SandboxError(f"the sandbox did not start; see {folder / 'server.log'}")
    return (
        f"https://127.0.0.1:{info['port']}",
        float(info.get("scale", DEFAULT_SCALE)),
        str(info["ca"]),
    )


def stop(home: Path) -> bool:
    """Stop the emulator; True when one was running."""
    info = running(home)
    if info is None:
        return False
    try:
        os.kill(int(info["pid"]), signal.SIGTERM)
    except ProcessLookupError:
        return False
    (_folder(home) / "endpoint.json").unlink(missing_ok=True)
    return True
