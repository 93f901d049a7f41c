"""Starting, finding and stopping the sandbox emulator (a background process).

The sandbox's state lives in that process, so it persists between commands until
`fmctl sandbox stop` (or the machine restarts). Its address is in FMCTL_HOME/sandbox.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fmctl_sandbox.protocol import SANDBOX_SERVICE
from fmctl_sandbox.sigv4 import Credentials

#: Documented durations are multiplied by this in the sandbox (10 min of FSx -> 3 s).
DEFAULT_SCALE = 0.005


class SandboxError(Exception):
    """The emulator could not be started or reached (the CLI reports it as one of fmctl's
    errors: ``ops.errors.as_error``; the sandbox imports nothing of fmctl)."""


#: How long an operation of the sandbox's own may take to answer, in seconds. Most answer
#: from memory at once; these first make requests of their own to the emulator, one per
#: schedule due or notification sent (each a full AWS call: scaling a node group to zero
#: waits for the emulator's lock behind whatever else is running), so a loaded machine
#: takes longer than the default to answer them.
TIMEOUT_S = 5.0
ACTING_TIMEOUT_S = {"AdvanceClock": 180.0, "SetBudgetSpend": 180.0}

#: The module a sandbox server runs (tests run their double of it, around the same app).
SERVER = "fmctl_sandbox.server"


def _folder(home: Path) -> Path:
    folder = home / "sandbox"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder


def credentials_path(home: Path) -> Path:
    """Where the sandbox's key pair is kept (0600, in the 0700 sandbox folder)."""
    return _folder(home) / "credentials.json"


def credentials(home: Path) -> Credentials:
    """The key pair the running sandbox of ``home`` accepts."""
    try:
        return Credentials.load(credentials_path(home))
    except (OSError, ValueError, KeyError) as exc:
        raise SandboxError(f"the sandbox's credentials are unreadable: {exc}") from exc


def call(
    info: dict[str, Any],
    creds: Credentials,
    action: str,
    body: dict[str, Any] | None = None,
    region: str = "us-east-1",
) -> dict[str, Any]:
    """One operation of the sandbox's own service (``SANDBOX_SERVICE``), signed as
    every request to the emulator must be; JSON in and out."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials

    url = f"https://127.0.0.1:{info['port']}/"
    payload = json.dumps(body or {}).encode()
    request = AWSRequest(
        method="POST",
        url=url,
        data=payload,
        headers={
            "Content-Type": "application/x-amz-json-1.1",
            "X-Amz-Target": f"FmctlSandbox.{action}",
        },
    )
    signer = SigV4Auth(BotoCredentials(creds.access_key, creds.secret_key), SANDBOX_SERVICE, region)
    signer.add_auth(request)
    prepared = urllib.request.Request(
        url, data=payload, headers=dict(request.headers.items()), method="POST"
    )
    context = ssl.create_default_context(cafile=info["ca"])
    timeout = ACTING_TIMEOUT_S.get(action, TIMEOUT_S)
    try:
        with urllib.request.urlopen(prepared, timeout=timeout, context=context) as answer:
            result: dict[str, Any] = json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        raise SandboxError(f"the sandbox refused {action}: {exc.read()[:200]!r}") from exc
    except OSError as exc:  # URLError, a refused connection, a read past the timeout
        raise SandboxError(
            f"the sandbox at {url} did not answer {action} within {timeout:g} s ({exc}); "
            "`fmctl sandbox stop` and run again to start a fresh one"
        ) from exc
    return result


def _healthy(info: dict[str, Any], home: Path) -> bool:
    try:
        return bool(call(info, credentials(home), "Health").get("ok"))
    except (OSError, ValueError, KeyError, SandboxError):
        return False


def running(home: Path) -> dict[str, Any] | None:
    """The running emulator's {"port", "pid", "scale", "ca"}, or None."""
    path = _folder(home) / "endpoint.json"
    try:
        info: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return info if _healthy(info, home) else None


def ensure(
    home: Path, scale: float | None = None, server: str = SERVER, cwd: Path | None = None
) -> tuple[str, float, str]:
    """The emulator's endpoint URL, time scale and CA bundle, starting it if needed (with
    fresh credentials: a sandbox's key pair lives as long as its state). ``server``: the
    module to run (tests give their double's; ``cwd``: where it is importable)."""
    info = running(home)
    if info is None:
        try:
            import moto  # noqa: F401
        except ImportError as exc:
            raise SandboxError("the sandbox needs moto: pip install 'fmctl[sandbox]'") from exc
        with _starting(home):
            info = running(home) or _start(home, scale, server, cwd)
    return (
        f"https://127.0.0.1:{info['port']}",
        float(info.get("scale", DEFAULT_SCALE)),
        str(info["ca"]),
    )


@contextlib.contextmanager
def _starting(home: Path) -> Iterator[None]:
    """One start at a time per home: two would each write their own key pair."""
    import fcntl

    with open(_folder(home) / "start.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _start(home: Path, scale: float | None, server: str, cwd: Path | None) -> dict[str, Any]:
    """Start a server and wait until it answers."""
    folder = _folder(home)
    ready = folder / "endpoint.json"
    ready.unlink(missing_ok=True)
    Credentials.generate().save(credentials_path(home))
    if scale is None:
        scale = float(os.environ.get("FMCTL_SANDBOX_SCALE", DEFAULT_SCALE))
    log = open(folder / "server.log", "ab")  # noqa: SIM115 - handed to the child
    subprocess.Popen(
        [
            sys.executable,
            "-m",
            server,
            "--ready-file",
            str(ready),
            "--credentials",
            str(credentials_path(home)),
            "--scale",
            str(scale),
        ],
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        cwd=cwd,
        env={**os.environ, "AWS_EC2_METADATA_DISABLED": "true"},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        info = running(home)
        if info is not None:
            return info
        time.sleep(0.1)
    raise SandboxError(f"the sandbox did not start; see {folder / 'server.log'}")


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
    credentials_path(home).unlink(missing_ok=True)
    return True
