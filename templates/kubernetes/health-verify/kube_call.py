"""The Kubernetes API as a pod's service account sees it, with Python's standard library:
what fmctl's in-cluster programs (the verify controller, the node health agent) call it
with. The token is read again for every request (the kubelet rotates it)."""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Passes that may fail in a row before a program exits: its kubelet starts it again (with
#: back-off); a program whose API has gone for good (a sandbox stopped under it) ends.
GIVE_UP = 20
#: Where the kubelet puts a pod's service account token and the cluster's CA.
ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


class ApiError(Exception):
    """The API server refused a request."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class Api:
    """The cluster's API as the pod's service account sees it."""

    def __init__(self, server: str, account: Path) -> None:
        self.server = server.rstrip("/")
        self.account = account
        ca = account / "ca.crt"
        self.tls = ssl.create_default_context(cafile=str(ca)) if ca.exists() else None

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        ctype: str = "application/json",
    ) -> Any:
        """One request; the decoded JSON answer (text for a log)."""
        token = (self.account / "token").read_text().strip()
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.tls) as answer:
                text = answer.read().decode()
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")
            with contextlib.suppress(ValueError):
                detail = json.loads(detail).get("message", detail)
            raise ApiError(err.code, detail) from None
        if "/log" in path.split("?")[0]:
            return text
        return json.loads(text) if text else {}


def server_url(given: str | None) -> str | None:
    """The API's URL: ``given``, else the kubernetes Service's from the pod's env (None when
    neither: not in a cluster)."""
    if given:
        return given
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        return None
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def run_passes(
    one_pass: Callable[[], None],
    say: Callable[[str], None],
    interval: float,
    once: bool = False,
    alive: Path | None = None,
    errors: tuple[type[Exception], ...] = (),
) -> int:
    """Run ``one_pass`` every ``interval`` seconds (one with ``once``), touching ``alive``
    after each that went through; a failed pass (the API's refusal, an OS error, or one of
    ``errors``) is said and tried again next time, up to GIVE_UP in a row. The exit
    status."""
    failed = 0
    caught: tuple[type[Exception], ...] = (ApiError, OSError, *errors)
    while True:
        try:
            one_pass()
        except caught as err:
            failed += 1
            say(f"pass failed: {err} (next pass tries again)")
            if once:
                return 1
            if failed >= GIVE_UP:
                say(f"{failed} passes failed in a row: exiting")
                return 1
        else:
            failed = 0
            if alive is not None:
                alive.touch()
        if once:
            return 0
        time.sleep(interval)
