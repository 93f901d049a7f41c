"""The client side of the sandbox's own operations (``fmctl_sandbox.daemon.call``): an
operation that makes requests of its own before it answers is given the time to, and one
that gets no answer is the sandbox's error, not a traceback."""

from __future__ import annotations

import http.server
import json
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fmctl_sandbox import daemon
from fmctl_sandbox.sigv4 import Credentials
from fmctl_sandbox.tls import make_certificate

#: How long the slow server below takes to answer any request.
DELAY_S = 0.6


class _Slow(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(DELAY_S)
        body = json.dumps({"runs": [], "now": 0}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def slow_server(tmp_path: Path) -> Iterator[dict[str, Any]]:
    crt, key = make_certificate(tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(crt, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {"port": server.server_address[1], "ca": str(crt)}
    finally:
        server.shutdown()
        server.server_close()


def test_an_acting_operation_waits_longer_than_a_question(
    slow_server: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Scaled down: a question gets less than the server's delay, AdvanceClock more.
    monkeypatch.setattr(daemon, "TIMEOUT_S", DELAY_S / 3)
    monkeypatch.setitem(daemon.ACTING_TIMEOUT_S, "AdvanceClock", DELAY_S * 5)
    keys = Credentials("AKIDSANDBOXTEST", "secret")
    assert daemon.call(slow_server, keys, "AdvanceClock", {"seconds": 60}) == {
        "runs": [],
        "now": 0,
    }
    with pytest.raises(daemon.SandboxError) as raised:
        daemon.call(slow_server, keys, "Health")
    said = str(raised.value)
    assert "did not answer Health within" in said, said
    assert "fmctl sandbox stop" in said, said


def test_every_acting_operation_the_server_has_is_given_longer() -> None:
    # The names must be the server's own operations, or the longer wait never applies.
    server = Path(daemon.__file__).with_name("server.py").read_text()
    for action, timeout in daemon.ACTING_TIMEOUT_S.items():
        assert f'call.action == "{action}"' in server, action
        assert timeout > daemon.TIMEOUT_S
